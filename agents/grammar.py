"""The shape a code block must have, as a grammar the sampler keeps every token inside.

A small base model left to itself opens strings it never closes, forgets the registration
call, or fills the block with blank lines until its token limit. With structured decoding
(xgrammar's EBNF, applied to the logits while sampling) every candidate of an action or
evaluation block is a callback definition and its registration call, strings and brackets
closed on their line, and the end marker: only what the code does can still be wrong.

The grammars are deliberately narrow where a small model goes astray: no blank lines, no
line without code, brackets that close on the line they open (one statement a line), at
most `MAX_LINES` lines in a callback. Prose blocks (orientation, expectation, debug) are
not constrained.
"""

from __future__ import annotations

from agents import blocks

#: The most lines a callback's body may take under the grammar.
MAX_LINES = 40
#: The most nested indentation levels inside a callback, beyond its own.
MAX_DEPTH = 4

# One Python line's text: code characters, strings closed on the line, brackets closed on
# the line. Lines may end in a comment.
_LINE_RULES = r"""
chunk ::= [^"'()\[\]{}\n#] | dq | sq | "(" inner* ")" | "[" inner* "]" | "{" inner* "}"
inner ::= [^"'()\[\]{}\n] | dq | sq | "(" inner* ")" | "[" inner* "]" | "{" inner* "}"
dq ::= "\"" ([^"\\\n] | "\\" [^\n])* "\""
sq ::= "'" ([^'\\\n] | "\\" [^\n])* "'"
comment ::= "#" [^\n]*
code ::= [^ \n#"'()\[\]{}] chunk* comment?
name ::= [a-z_] [a-z0-9_]{0,40}
title ::= "\"" [^"\n\\]{1,80} "\""
"""

_BODY = f"""
body ::= line{{1,{MAX_LINES}}}
line ::= "    " ("    "){{0,{MAX_DEPTH}}} code "\\n"
"""


def _callback(method: str) -> str:
    return f'"def " name "(subagent):\\n" body "self.{method}(" title ", " name ")\\n"'


#: Per block kind, the EBNF its body must follow, ending with the end marker.
GRAMMARS: dict[str, str] = {
    blocks.ACTION: f'root ::= {_callback("add_action")} "{blocks.END_MARKER}"'
    + _BODY
    + _LINE_RULES,
    blocks.EVALUATION: f'root ::= ({_callback("add_evaluation")}){{1,3}} "{blocks.END_MARKER}"'
    + _BODY
    + _LINE_RULES,
    # Observation views: any top-level statements (definitions, registrations, removals).
    blocks.OBSERVATION_INFERENCE: f'root ::= top{{1,{MAX_LINES}}} "{blocks.END_MARKER}"\n'
    'top ::= ("    "){0,' + str(MAX_DEPTH + 1) + '} code "\\n"' + _LINE_RULES,
}


def block_grammar(kind: str) -> str | None:
    """The grammar a block of `kind` is sampled under, or None (unconstrained)."""
    return GRAMMARS.get(kind)
