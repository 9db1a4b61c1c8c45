"""What helps a real model without training: the worked example tick, the grammar of code
blocks, ranking that never rewards a copy, sampling defaults by device and model size.
The tiny real model, the real sandbox, a real store."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from agents import blocks, ranking
from agents.blocks import example_text
from agents.example import example_bodies
from agents.grammar import block_grammar, lines_for
from agents.runtime import RunOptions, auto_defaults
from agents.settings import load_settings
from storage import Author, SessionStatus, TraceStore
from tests.support.runs import make_runtime

pytestmark = pytest.mark.timeout(300)


def test_the_example_is_fixed_and_says_it_is_another_task() -> None:
    text = example_text(1)
    assert text == example_text(1)
    assert text.startswith("#example session: ANOTHER TASK, NOT YOURS.")
    assert text.rstrip().endswith("its checks are different; write your blocks for them.")
    # its blocks are rendered as the session's own: headers, #q: lines, the outcome table
    for kind in ("genesis", "orientation", "action", "expectation", "evaluation", "outcome"):
        assert f"#startblock type: {kind}\n" in text
    assert text.count("\n#endblock\n") == 8
    for body in example_bodies(1)[3:]:  # the action and the evaluation are valid code
        if "def " in body:
            assert blocks.parse_error(body) is None
    with pytest.raises(ValueError):
        example_text(2)


def test_a_session_with_the_example_re_renders_every_prompt(
    tmp_path: Path, backend: object
) -> None:
    with TraceStore(tmp_path / "traces.db") as store:
        runtime, _ = make_runtime(
            store, backend, tmp_path, approval="deny", escalation=(), example=True
        )
        outcome = runtime.run()
        assert outcome.status is SessionStatus.TRUNCATED
        tree = store.tree(outcome.session_id)
        genesis = tree[0]
        assert genesis.kind == blocks.GENESIS and genesis.meta["example"] == 1
        model_nodes = [n for n in tree if n.author is Author.MODEL]
        assert model_nodes
        for node in model_nodes:
            assert node.parent_id is not None
            prefix = blocks.block_prompt(store.path(node.parent_id), node)
            assert prefix.startswith(example_text(1))
            assert blocks.prompt_hash(prefix) == node.prompt_hash
        # a session without the example renders without it
        runtime, _ = make_runtime(store, backend, tmp_path, approval="deny", escalation=())
        plain = runtime.run()
        first = store.tree(plain.session_id)[0]
        assert "example" not in first.meta
        assert not blocks.render_block(first).startswith("#example")


GOOD_ACTION = example_bodies(1)[3] + "\n#endblock"
GOOD_EVALUATION = example_bodies(1)[5] + "\n#endblock"


def _matches(grammar: str, text: str, tokenizer: object) -> bool:
    import xgrammar as xgr

    info = xgr.TokenizerInfo.from_huggingface(tokenizer)
    matcher = xgr.GrammarMatcher(xgr.GrammarCompiler(info).compile_grammar(grammar))
    ids = tokenizer.encode(text, add_special_tokens=False)  # type: ignore[attr-defined]
    return all(matcher.accept_token(i) for i in ids)


def test_the_grammars_take_good_blocks_and_refuse_what_small_models_fall_into(
    tiny_model_dir: Path,
) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    action, evaluation = block_grammar(blocks.ACTION), block_grammar(blocks.EVALUATION)
    assert block_grammar(blocks.ORIENTATION) is None
    assert _matches(action, GOOD_ACTION, tokenizer)
    assert _matches(evaluation, GOOD_EVALUATION, tokenizer)
    body = "def f(subagent):\n    return 1\n"
    refused = {
        "blank lines": body.replace("\n    return", "\n\n    return")
        + 'self.add_action("t", f)\n#endblock',
        "an open string": 'def f(subagent):\n    x = "abc\nself.add_action("t", f)\n#endblock',
        "a string left open": 'def f(subagent):\n    x = ("abc,\nself.add_action("t", f)\n#endblock',
        "no registration": body + "#endblock",
        "the wrong registration": body + 'self.add_evaluation("t", f)\n#endblock',
    }
    for why, text in refused.items():
        assert not _matches(action, text, tokenizer), why
    # seen on Gemma at 256 tokens: one line over and over until the block was cut off;
    # the grammar leaves only as many lines as the block's tokens have room for
    lines = lines_for(256)
    assert 10 <= lines < lines_for(512)
    looping = "def f(subagent):\n" + "    subagent.complete_text_value(subagent)\n" * (lines + 1)
    looping += 'self.add_action("t", f)\n#endblock'
    assert not _matches(block_grammar(blocks.ACTION, 256), looping, tokenizer)
    assert _matches(block_grammar(blocks.ACTION, 512), looping, tokenizer)
    fits = looping.replace("    subagent.complete_text_value(subagent)\n", "", 1)
    assert _matches(block_grammar(blocks.ACTION, 256), fits, tokenizer)


def test_a_copy_is_never_chosen_while_a_fresh_candidate_exists() -> None:
    reminder = "Task: Summarise sales.csv\nWrite the total of the amount column to total.txt."
    earlier = [reminder, *example_bodies(1)]
    bodies = [
        reminder.split("\n", 1)[1],  # the task said back
        example_bodies(1)[2],  # the example's orientation
        "# sales.csv has an amount column; I sum it and write the total to total.txt.",
    ]
    scored = ranking.score_candidates("orientation", bodies, [5.0, 4.0, -1.0], earlier)
    assert [s.copy for s in scored] == [True, True, False]
    # seen on Gemma: the task said back as comment lines, under a line of its own
    task = (
        "Write a JSON object to summary.json with two keys: revenue_by_region, the sum of\n"
        "units * price over each region's rows, and best_selling_product, the product with\n"
        "the most units sold."
    )
    commented = "#The task is to summarise sales.\n" + "".join(
        f"#{line}\n" for line in task.split("\n")
    )
    assert ranking.is_copy(commented, [f"Task: Summarise sales.csv\n{task}"])
    # seen on Gemma when the context's runs of tokens were banned: the task reflowed,
    # a word changed every few words (no 24-character window of it is the task's)
    reminder2 = (
        "Task: Summarise sales.csv as JSON\nYour work directory holds sales.csv: 40 sales "
        "records with the columns region, product,\nunits (a whole number) and price (the "
        "unit price of that sale, in dollars). The same\nproduct can sell at different "
        "prices in different rows.\n\nWrite summary.json in the work directory: one JSON "
        'object with exactly these two keys:\n- "revenue_by_region": an object mapping each '
        "region name (as written in the CSV) to its\n  total revenue, the sum of units * "
        "price over that region's rows, as a number rounded\n  to 2 decimals (not a "
        'string);\n- "best_selling_product": the name of the product with the most units '
        "sold [...]"
    )
    reflowed = (
        "task:\nYour work directory holds sales: 40 sales records with\nthe columns region, "
        "product, units (a whole number) and price\n(the unit price of that sale,\nin "
        "dollars). The same product can sell at different prices in different\nrows.\n\n"
        "Write summary.json in your work directory: one JSON object with exact these two "
        'keys:\n- "region": the region name (as written in the csv)\n- "product": the'
    )
    assert ranking._copied_share(reflowed, [reminder2]) < ranking.COPY_SHARE
    assert ranking.is_copy(reflowed, [reminder2])
    # code that shares the example's idioms but does its own work is not a copy
    fresh_check = (
        "def summary_has_both_keys(subagent):\n"
        '    data = json.loads(subagent.read_file("summary.json"))\n'
        '    return set(data) == {"revenue_by_region", "best_selling_product"}\n'
        'self.add_evaluation("summary.json has both keys", summary_has_both_keys)'
    )
    assert not ranking.is_copy(fresh_check, [reminder2, *example_bodies(1)])
    assert ranking.pick(scored, "best", random.Random(0)) == 2
    assert {ranking.pick(scored, "softmax", random.Random(s)) for s in range(30)} == {2}
    # code that parses is chosen over code that does not, whatever their scores
    code = ranking.score_candidates(
        "action",
        ['def f(subagent):\n    return open("x\nself.add_action("t", f)', fresh_check],
        [6.0, -1.0],
        earlier,
    )
    assert not code[0].parses and code[1].parses
    assert ranking.pick(code, "best", random.Random(0)) == 1
    # escalation goes on while every candidate is a copy, whatever their scores
    only_copies = scored[:2]
    assert not ranking.good_enough("orientation", only_copies, threshold=-100.0)
    assert ranking.pick(only_copies, "best", random.Random(0)) == 0


def test_sampling_defaults_follow_the_model(backend: object, tmp_path: Path) -> None:
    empty = tmp_path / "config.toml"
    empty.write_text("")
    settings = load_settings(empty, environ={})
    # the tiny model is a toy: the plumbing tests' defaults
    toy = RunOptions.from_settings(settings, backend)  # type: ignore[arg-type]
    assert (toy.candidates, toy.escalation, toy.block_tokens) == (4, (4, 16), 512)
    assert not toy.example and not toy.constrain
    assert auto_defaults(None) == auto_defaults(backend)  # type: ignore[arg-type]
    # what is set wins over what is chosen
    named = load_settings(
        empty, flags={"candidates": 2, "escalation": "", "example": "on"}, environ={}
    )
    chosen = RunOptions.from_settings(named, backend)  # type: ignore[arg-type]
    assert (chosen.candidates, chosen.escalation, chosen.example) == (2, (), True)
    assert chosen.describe() == (
        "2 candidates a block at temperature 0.8, escalation none, 512 tokens a block, "
        "document prompts, "
        "callback blocks, example tick on, grammar off"
    )
