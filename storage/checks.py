"""How many of a block's (or a tick's) evaluation callbacks passed, failed or raised.

The tree's tick line, the inspector's heading and anything else that says "N/M checks
passed" count with this, so they cannot disagree. Only callbacks are checks: a logit
question or an observation view has no verdict to count.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, Protocol

from storage.domain import EvaluationKind

CheckVerdict = Literal["pass", "fail", "error"]


class Checked(Protocol):
    """A stored evaluation result, or the runtime's event announcing one."""

    @property
    def kind(self) -> EvaluationKind: ...
    @property
    def passed(self) -> bool | None: ...
    @property
    def error(self) -> str | None: ...


def check_verdict(result: Checked) -> CheckVerdict:
    """A callback that raised is an error whatever it returned; one that returned
    anything but a pass (False, a string, nothing) failed."""
    if result.error is not None:
        return "error"
    return "pass" if result.passed is True else "fail"


@dataclass(frozen=True, slots=True)
class CheckCounts:
    passed: int = 0
    #: returned something other than a pass
    failed: int = 0
    #: raised (or was killed) instead of returning
    errored: int = 0

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.errored

    @property
    def all_passed(self) -> bool:
        return self.passed == self.total

    def __add__(self, other: CheckCounts) -> CheckCounts:
        return CheckCounts(
            self.passed + other.passed, self.failed + other.failed, self.errored + other.errored
        )

    def summary(self) -> str:
        """ "1/3 checks passed, 1 error": errors count as not passed, and are named."""
        text = f"{self.passed}/{self.total} checks passed"
        if self.errored:
            text += f", {self.errored} error{'s' if self.errored > 1 else ''}"
        return text


def count_checks(results: Iterable[Checked]) -> CheckCounts:
    """The callbacks among `results` by verdict (other kinds of evaluation are skipped)."""
    verdicts = [check_verdict(r) for r in results if r.kind is EvaluationKind.CALLBACK]
    return CheckCounts(verdicts.count("pass"), verdicts.count("fail"), verdicts.count("error"))
