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
from collections.abc import Sequence
from dataclasses import dataclass, field

from agents import blocks

QUESTIONS = {
    blocks.ORIENTATION: "Does this orientation reason well about what to do next?",
    blocks.ACTION: "Is this action likely to make progress on the task?",
    blocks.BACKTRACK: "Does this backtrack block find a better way forward?",
    blocks.DEBUG: "Does this debug block find the cause of the error?",
    blocks.EXPECTATION: "Does this expectation say clearly how success and failure would look?",
    blocks.OBSERVATION_INFERENCE: "Do these observation views help with the task?",
    blocks.EVALUATION: "Do these evaluations check whether the action worked?",
}
OPTION_QUESTION = "Do the observation views need to change before the next tick?"
OUTCOME_QUESTION = "Does this outcome match the expectation?"

#: Answered examples the question follows, so the next token is a Yes or a No.
CALIBRATION = "#q: Is Paris the capital of France? Yes.\n#q: Is seven an even number? No.\n"

SYNTAX_PENALTY = -2.0
EMPTY_PENALTY = -3.0
REPEAT_PENALTY = -1.0
LINT_PENALTY = -0.5
REPEAT_SIMILARITY = 0.9

#: Code blocks must register their callbacks through these methods.
REQUIRED_CALL = {
    blocks.ACTION: "add_action",
    blocks.EVALUATION: "add_evaluation",
}


def question_prompt(prompt: str, body: str, question: str) -> str:
    """What the evaluator reads: the block as written (prompt is context + header), then
    the calibration lines and the question, ready for the answer token."""
    return f"{prompt}{body.rstrip()}\n{CALIBRATION}#q: {question}"


def penalties(kind: str, body: str, earlier: Sequence[str]) -> dict[str, float]:
    """Penalty parts for one candidate: empty text, code that does not parse, a code
    block that registers nothing, a near-copy of an earlier block of the same kind."""
    parts: dict[str, float] = {}
    text = body.strip()
    if not text:
        return {"empty": EMPTY_PENALTY}
    if kind in blocks.CODE_KINDS:
        if blocks.parse_error(body) is not None:
            parts["syntax"] = SYNTAX_PENALTY
        elif kind in REQUIRED_CALL and REQUIRED_CALL[kind] not in body:
            parts["lint"] = LINT_PENALTY
    if any(previous.strip() == text for previous in earlier) or (
        len(text) > 40 and _near_copy(text, earlier)
    ):
        parts["repetition"] = REPEAT_PENALTY
    return parts


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
    def parses(self) -> bool:
        return "syntax" not in self.parts and "empty" not in self.parts


def score_candidates(
    kind: str,
    bodies: Sequence[str],
    log_odds: Sequence[float],
    earlier: Sequence[str],
) -> list[Scored]:
    out = []
    for body, evaluator in zip(bodies, log_odds, strict=True):
        value = evaluator if math.isfinite(evaluator) else math.copysign(20.0, evaluator)
        out.append(Scored(body, {"evaluator": value, **penalties(kind, body, earlier)}))
    return out


def good_enough(kind: str, scored: Sequence[Scored], threshold: float) -> bool:
    """Whether escalation can stop: the best clears the threshold, and for code blocks
    something parses."""
    if not scored:
        return False
    if kind in blocks.CODE_KINDS and not any(s.parses for s in scored):
        return False
    return max(s.score for s in scored) >= threshold


def pick(scored: Sequence[Scored], how: str, rng: random.Random) -> int:
    """Index of the chosen candidate: the best score (first on ties), or a softmax draw."""
    if how == "softmax":
        top = max(s.score for s in scored)
        weights = [math.exp(s.score - top) for s in scored]
        return rng.choices(range(len(scored)), weights=weights)[0]
    return max(range(len(scored)), key=lambda i: (scored[i].score, -i))
