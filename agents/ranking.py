"""Ranking sibling candidates: the logit evaluator's verdict plus penalties.

The evaluator asks the model one yes/no question per block kind, right after the
candidate block, with a couple of calibration lines before it, and reads the answer as
log-odds `ln p(yes) - ln p(no)` over the next token (`Backend.score_yes_no`, one batch for
all candidates). Penalties are added on top; every part is stored on the node, so a block
can be re-scored later with other weights.
"""

from __future__ import annotations

import difflib
import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from agents import blocks, forms

#: Answered examples the question follows, so the next token is a Yes or a No.
CALIBRATION = "#q: Is Paris the capital of France? Yes.\n#q: Is seven an even number? No.\n"

SYNTAX_PENALTY = -2.0
EMPTY_PENALTY = -3.0
#: A copy of earlier text (a block of the session, the task, the example) is worth less than
#: any block that says something new, and is never chosen while another candidate is not
#: a copy (`pick`).
REPEAT_PENALTY = -4.0
LINT_PENALTY = -0.5
#: A script that only defines things (a function never called) does nothing when run.
INERT_PENALTY = -2.0
REPEAT_SIMILARITY = 0.9
#: With the "greedy" pick, the greedy candidate (the first) stays chosen unless another
#: scores this much more: the yes/no question is weak evidence next to the model's own
#: most likely answer (an untuned value; e^3 is odds twenty times as good).
GREEDY_MARGIN = 3.0
#: A candidate is a copy when this share of its text lies in passages of `COPY_WINDOW`
#: characters found verbatim in earlier text (a copied task reminder, an example block).
COPY_SHARE = 0.75
COPY_WINDOW = 24
COPY_STRIDE = 8
#: ... or when COPY_WORD_SHARE of its runs of COPY_WORDS words (case and punctuation
#: left out) are runs of earlier text: a copy reflowed, or edited every few words.
COPY_WORDS = 4
COPY_WORD_SHARE = 0.6

#: Code blocks must register their callbacks through these methods.
REQUIRED_CALL = {
    blocks.ACTION: "add_action",
    blocks.EVALUATION: "add_evaluation",
}


def question_prompt(prompt: str, body: str, question: str) -> str:
    """What the evaluator reads: the block as written (prompt is context + header), then
    the calibration lines and the question, ready for the answer token."""
    return f"{prompt}{body.rstrip()}\n{CALIBRATION}#q: {question}"


def penalties(
    kind: str, body: str, earlier: Sequence[str], form: str = forms.CALLBACK
) -> dict[str, float]:
    """Penalty parts for one candidate: empty text, code that does not parse, a code
    block that registers nothing, a script that does nothing when run, a near-copy of an
    earlier block of the same kind."""
    parts: dict[str, float] = {}
    text = body.strip()
    if not text:
        return {"empty": EMPTY_PENALTY}
    if kind in blocks.CODE_KINDS:
        if not forms.registers(kind, form, body) and form == forms.SCRIPT:
            return {"empty": EMPTY_PENALTY}  # a script or a file with nothing in it
        if forms.parse_error(kind, form, body) is not None:
            parts["syntax"] = SYNTAX_PENALTY
        elif kind in REQUIRED_CALL and not forms.registers(kind, form, body):
            parts["lint"] = LINT_PENALTY
        elif forms.inert(kind, form, body):
            parts["inert"] = INERT_PENALTY
    if is_copy(text, earlier):
        parts["repetition"] = REPEAT_PENALTY
    return parts


def is_copy(text: str, earlier: Sequence[str]) -> bool:
    """Whether `text` repeats earlier text: the same, nearly the same as one earlier
    block, or mostly made of passages copied from them (a block copied out of a longer
    one, pieces of several)."""
    text = text.strip()
    if any(previous.strip() == text for previous in earlier):
        return True
    if len(text) <= 40:  # short texts are only ever exact copies
        return False
    return (
        _copied_share(text, earlier) >= COPY_SHARE
        or _copied_word_share(text, earlier) >= COPY_WORD_SHARE
        or _near_copy(text, earlier)
    )


def _copied_share(text: str, earlier: Sequence[str]) -> float:
    """The share of `text`'s windows of COPY_WINDOW characters (every COPY_STRIDE) that
    occur verbatim in the earlier texts, whitespace runs counted as one space and comment
    marks left out (a task said back as `# ...` lines is still the task)."""
    flat = _flat(text)
    if len(flat) < COPY_WINDOW:
        return 0.0
    joined = "\n".join(_flat(previous) for previous in earlier)
    starts = range(0, len(flat) - COPY_WINDOW + 1, COPY_STRIDE)
    found = sum(1 for i in starts if flat[i : i + COPY_WINDOW] in joined)
    return found / len(starts)


def _copied_word_share(text: str, earlier: Sequence[str]) -> float:
    """The share of `text`'s runs of COPY_WORDS words found among the earlier texts'."""
    runs = _word_runs(text)
    if len(runs) < 2 * COPY_WORDS:
        return 0.0
    seen = set().union(*(set(_word_runs(previous)) for previous in earlier))
    return sum(1 for run in runs if run in seen) / len(runs)


def _word_runs(text: str) -> list[tuple[str, ...]]:
    words = re.findall(r"\w+", text.lower())
    return [tuple(words[i : i + COPY_WORDS]) for i in range(len(words) - COPY_WORDS + 1)]


def _flat(text: str) -> str:
    return " ".join(text.replace("#", " ").split())


def _near_copy(text: str, earlier: Sequence[str]) -> bool:
    """Whether `text` is at least REPEAT_SIMILARITY alike to one of `earlier`. One matcher
    holds `text` as its second sequence, which difflib indexes once for all comparisons;
    the cheap upper bounds rule most pairs out before the full ratio."""
    matcher = difflib.SequenceMatcher(None, autojunk=True)
    matcher.set_seq2(text)
    for previous in earlier:
        matcher.set_seq1(previous.strip())
        if (
            matcher.real_quick_ratio() >= REPEAT_SIMILARITY
            and matcher.quick_ratio() >= REPEAT_SIMILARITY
            and matcher.ratio() >= REPEAT_SIMILARITY
        ):
            return True
    return False


@dataclass(slots=True)
class Scored:
    body: str
    parts: dict[str, float] = field(default_factory=dict)

    @property
    def score(self) -> float:
        return sum(self.parts.values())

    @property
    def copy(self) -> bool:
        return "repetition" in self.parts

    @property
    def parses(self) -> bool:
        return "syntax" not in self.parts and "empty" not in self.parts


def score_candidates(
    kind: str,
    bodies: Sequence[str],
    log_odds: Sequence[float],
    earlier: Sequence[str],
    form: str = forms.CALLBACK,
    truncated: Sequence[bool] | None = None,
) -> list[Scored]:
    """Each body with its evaluator's log-odds and its penalties, these judged on what of
    it runs (`forms.as_run`: a block cut by the token limit, `truncated`, runs in part)."""
    cut = truncated if truncated is not None else [False] * len(bodies)
    out = []
    for body, evaluator, was_cut in zip(bodies, log_odds, cut, strict=True):
        value = evaluator if math.isfinite(evaluator) else math.copysign(20.0, evaluator)
        runs = forms.as_run(kind, form, body, was_cut)
        out.append(Scored(body, {"evaluator": value, **penalties(kind, runs, earlier, form)}))
    return out


def good_enough(kind: str, scored: Sequence[Scored], threshold: float) -> bool:
    """Whether escalation can stop: the best clears the threshold, and for code blocks
    something parses."""
    if not scored:
        return False
    fresh = [s for s in scored if not s.copy]
    if not fresh:
        return False
    if kind in blocks.CODE_KINDS and not any(s.parses for s in fresh):
        return False
    return max(s.score for s in fresh) >= threshold


def pick(scored: Sequence[Scored], how: str, rng: random.Random) -> int:
    """Index of the chosen candidate: the best score (first on ties), a softmax draw, or
    ("greedy") the first, the greedy one, unless another beats it by GREEDY_MARGIN;
    among the candidates that parse and are not copies while there is one, else among
    those that are not copies, else among those that parse."""
    everyone = list(range(len(scored)))
    pool = (
        [i for i in everyone if scored[i].parses and not scored[i].copy]
        or [i for i in everyone if not scored[i].copy]
        or [i for i in everyone if scored[i].parses]
        or everyone
    )
    if how == "softmax":
        top = max(scored[i].score for i in pool)
        weights = [math.exp(scored[i].score - top) for i in pool]
        return rng.choices(pool, weights=weights)[0]
    best = max(pool, key=lambda i: (scored[i].score, -i))
    if how == "greedy" and 0 in pool and scored[0].score + GREEDY_MARGIN >= scored[best].score:
        return 0
    return best
