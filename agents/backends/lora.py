"""Checks on a LoRA adapter folder that need neither torch nor peft.

Every backend loads adapters from a folder in PEFT format (what `trainer.save_model` and
`PeftModel.save_pretrained` write, and what vLLM's `--lora-modules` reads). A wrong path
or a folder of the wrong kind otherwise surfaces as a deep peft traceback or an HTTP 400
from a server; reading the folder first turns it into one line the operator can act on.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from agents.backends.base import AdapterError
from agents.user_files import read_user_file

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
#: An adapter_config.json larger than this is refused unread (PEFT writes a few KiB).
MAX_CONFIG_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class AdapterInfo:
    """What the adapter's own config says about it."""

    path: Path
    rank: int
    base_model: str | None
    target_modules: tuple[str, ...]


def read_adapter(name: str, path: str | Path) -> AdapterInfo:
    """The adapter at `path`, checked to be a LoRA adapter in PEFT format, or AdapterError
    (one line naming the adapter and the problem)."""
    folder = Path(path).expanduser()
    where = f"adapter {name!r} at {folder}"
    try:
        is_dir = folder.is_dir()
    except OSError as exc:  # a name too long, a folder we may not look into
        raise AdapterError(f"{where}: {exc.strerror or exc}") from None
    if not is_dir:
        raise AdapterError(f"{where}: no such folder")
    config_file = folder / ADAPTER_CONFIG
    try:
        config = json.loads(read_user_file(config_file, MAX_CONFIG_BYTES, ADAPTER_CONFIG))
    except FileNotFoundError:
        raise AdapterError(f"{where}: no {ADAPTER_CONFIG} (not a PEFT adapter folder)") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise AdapterError(f"{where}: unreadable {ADAPTER_CONFIG}: {exc}") from None
    if not isinstance(config, dict):
        raise AdapterError(f"{where}: {ADAPTER_CONFIG} is not a JSON object")
    kind = config.get("peft_type")
    if kind != "LORA":
        raise AdapterError(f"{where}: a {kind or 'unknown'} adapter; only LoRA is supported")
    if not any((folder / weights).is_file() for weights in ADAPTER_WEIGHTS):
        raise AdapterError(f"{where}: no adapter weights ({' or '.join(ADAPTER_WEIGHTS)})")
    safetensors = folder / ADAPTER_WEIGHTS[0]
    if safetensors.is_file():
        problem = safetensors_problem(safetensors)
        if problem is not None:
            raise AdapterError(f"{where}: {safetensors.name} is damaged ({problem})")
    rank = config.get("r")
    if not isinstance(rank, int) or rank < 1:
        raise AdapterError(f"{where}: bad LoRA rank {rank!r} in {ADAPTER_CONFIG}")
    targets = config.get("target_modules") or ()
    if isinstance(targets, str):  # peft allows one regex instead of a list
        targets = (targets,)
    base = config.get("base_model_name_or_path")
    return AdapterInfo(
        path=folder,
        rank=rank,
        base_model=base if isinstance(base, str) and base else None,
        target_modules=tuple(str(t) for t in targets),
    )


def safetensors_problem(path: Path) -> str | None:
    """Why the safetensors file at `path` is not whole (cut short by a kill or a full disk,
    or not safetensors at all), or None. Reads only its header: the 8-byte header length,
    the JSON header, and the data offsets, which must cover the rest of the file exactly."""
    try:
        size = path.stat().st_size
        with path.open("rb") as file:
            head = file.read(8)
            if len(head) < 8:
                return f"{size} bytes: cut short before its header"
            (length,) = struct.unpack("<Q", head)
            if length > size - 8:
                return f"{size} bytes: cut short inside its {length}-byte header"
            header = json.loads(file.read(length))
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    except (UnicodeDecodeError, ValueError):
        return "its header is not JSON: not a safetensors file"
    if not isinstance(header, dict):
        return "its header is not a JSON object: not a safetensors file"
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) for o in offsets)
        ):
            return f"tensor {name!r} has no data offsets: not a safetensors file"
        end = max(end, offsets[1])
    expected = 8 + length + end
    if size < expected:
        return f"{size} of {expected} bytes: cut short"
    if size > expected:
        return f"{size} bytes where its header accounts for {expected}"
    return None
