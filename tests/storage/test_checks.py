"""`storage.checks`: the one count of a tick's checks that the tree, the inspector and
anything else saying "N/M checks passed" share."""

from __future__ import annotations

from storage import CheckCounts, EvaluationKind, EvaluationResult, check_verdict, count_checks


def result(
    passed: bool | None,
    error: str | None = None,
    kind: EvaluationKind = EvaluationKind.CALLBACK,
) -> EvaluationResult:
    return EvaluationResult(
        id=0, node_id=1, name="check", kind=kind, result=None, passed=passed, error=error,
        duration=None, created_at=0.0,
    )  # fmt: skip


def test_a_check_passes_only_when_it_returned_a_pass_and_raised_nothing() -> None:
    assert check_verdict(result(True)) == "pass"
    assert check_verdict(result(False)) == "fail"
    assert check_verdict(result(None)) == "fail"  # returned something that is no verdict
    assert check_verdict(result(None, error="NameError: x")) == "error"
    assert check_verdict(result(True, error="killed")) == "error"


def test_only_callbacks_are_counted() -> None:
    rows = [
        result(True),
        result(False),
        result(None, error="Traceback ..."),
        result(True, kind=EvaluationKind.LOGIT),
        result(False, kind=EvaluationKind.LOGIT),
        result(None, kind=EvaluationKind.OBSERVATION),
    ]
    counts = count_checks(rows)
    assert counts == CheckCounts(passed=1, failed=1, errored=1)
    assert counts.total == 3 and not counts.all_passed
    assert count_checks(rows[3:]) == CheckCounts()
    assert count_checks(rows[3:]).total == 0


def test_the_wording_counts_errors_as_not_passed_and_names_them() -> None:
    assert CheckCounts(passed=1, failed=1).summary() == "1/2 checks passed"
    assert CheckCounts(passed=2).summary() == "2/2 checks passed"
    assert CheckCounts(errored=1).summary() == "0/1 checks passed, 1 error"
    assert CheckCounts(passed=1, failed=1, errored=2).summary() == "1/4 checks passed, 2 errors"
    assert CheckCounts(passed=2).all_passed and not CheckCounts(passed=2, errored=1).all_passed


def test_counts_add_up() -> None:
    total = CheckCounts(1, 2, 3) + CheckCounts(passed=1, errored=1)
    assert total == CheckCounts(passed=2, failed=2, errored=4)
    assert total.total == 8
