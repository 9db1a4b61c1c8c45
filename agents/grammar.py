"""The shape a code block must have, as a grammar the sampler keeps every token inside.

A small base model left to itself opens strings it never closes, forgets the registration
call, or fills the block with blank lines until its token limit. With structured decoding
(xgrammar's EBNF, applied to the logits while sampling) every candidate of an action or
evaluation block is a callback definition and its registration call, strings closed on
their line, and the end marker. Brackets are left to the ranking (code that does not
parse loses to code that does): a grammar that balances them is too slow on a CPU.

The grammars are deliberately narrow where a small model goes astray: no blank lines, no
line without code, at most as many lines as the block's tokens leave room for (a model
that loops on a line must reach the end marker before its token limit). Prose blocks
(orientation, expectation, debug) are not constrained.
"""

from __future__ import annotations

from functools import cache

from agents import blocks

#: The most lines a callback's body may take under the grammar ...
MAX_LINES = 40
#: ... and fewer where the block's tokens are fewer: one line for this many tokens (a
#: line of a small model's code is 8-12 tokens; the definition and registration ~30).
TOKENS_A_LINE = 14
#: The most nested indentation levels inside a callback, beyond its own.
MAX_DEPTH = 4

# One Python line's text: code characters, strings closed on the line (no escaped quote
# inside), perhaps a comment at the end. Written inline, without a rule of its own inside
# the repetition: xgrammar then decides each token of Gemma's 262k vocabulary from a
# table, not by trying it (measured: a rule reference or a nested repetition here, such as
# brackets closed on the line, costs 70-130 ms a row per token instead of under 1 ms).
_QUOTED = r""""\"" [^"\n]* "\"" | "'" [^'\n]* "'" """.strip()
_LINE_RULES = rf"""
code ::= ([^ \n#"'] | {_QUOTED}) ([^"'\n#] | {_QUOTED})* ("#" [^\n]*)?
name ::= [a-z_] [a-z0-9_]{{0,40}}
title ::= "\"" [^"\n\\]{{1,80}} "\""
"""


def _body(lines: int) -> str:
    return f"""
body ::= line{{1,{lines}}}
line ::= "    " ("    "){{0,{MAX_DEPTH}}} code "\\n"
"""


def _callback(method: str) -> str:
    return f'"def " name "(subagent):\\n" body "self.{method}(" title ", " name ")\\n"'


def lines_for(block_tokens: int) -> int:
    """The most lines of code a block of `block_tokens` tokens may have under its grammar."""
    return max(4, min(MAX_LINES, block_tokens // TOKENS_A_LINE))


@cache
def block_grammar(kind: str, block_tokens: int = 512) -> str | None:
    """The grammar a block of `kind` is sampled under (None: unconstrained), with room for
    as many lines as `block_tokens` allows: an action's callback all of them, each of an
    evaluation's (one to three) a third, observation views all of them."""
    lines = lines_for(block_tokens)
    end = f'"{blocks.END_MARKER}"'
    if kind == blocks.ACTION:
        return f"root ::= {_callback('add_action')} {end}" + _body(lines) + _LINE_RULES
    if kind == blocks.EVALUATION:
        root = f"root ::= ({_callback('add_evaluation')}){{1,3}} {end}"
        return root + _body(max(2, lines // 3)) + _LINE_RULES
    if kind == blocks.OBSERVATION_INFERENCE:
        top = f'top ::= ("    "){{0,{MAX_DEPTH + 1}}} code "\\n"'
        return f"root ::= top{{1,{lines}}} {end}\n" + top + _LINE_RULES
    return None
