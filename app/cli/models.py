"""`agent-console models`: the models the project can have with no download (the
registry in agents/backends/registry.py), whether each is installed and converted, and
which is the default."""

from __future__ import annotations

import argparse
import json
from typing import Any

from app import exit_codes
from app.cli.train import table


def add_models_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    models = commands.add_parser(
        "models",
        help="list the models that need no download: installed, converted, size, licence, "
        "and which is the default",
        description="The models that ship on PyPI as GGUF chunk packages, one a line: "
        "whether their packages are installed, whether they are converted (and the folder's "
        "size), the GGUF's size, licence, base or instruction-tuned. `--model NAME` uses one; "
        "the first use converts it.",
    )
    models.add_argument(
        "--json", dest="as_json", action="store_true", help="one JSON object per model a line"
    )


def describe(name: str) -> dict[str, Any]:
    """What `models` says of one registry entry."""
    from agents.backends import offline
    from agents.backends.registry import DEFAULT, get

    model = get(name)
    folder = offline.model_folder(name=model)
    missing = offline.missing_packages(model)
    converted = offline.is_converted(folder, model)
    return {
        "name": model.name,
        "default": model.name == DEFAULT,
        "description": model.description,
        "parameters": model.parameters,
        "licence": model.licence,
        "instruction_tuned": model.instruction_tuned,
        "chat_template": model.chat_template,
        "installed": not missing,
        "missing_packages": missing,
        "install": offline.install_hint(model, missing) if missing else "",
        "converted": converted,
        "folder": str(folder),
        "folder_bytes": offline.folder_bytes(folder) if converted else 0,
        "gguf_bytes": model.size,
        "sha256": model.sha256,
        "packages": list(model.requirements),
        "extra": model.extra,
    }


def size(bytes_: int) -> str:
    return f"{bytes_ / 1e9:.1f} GB" if bytes_ >= 1e9 else f"{bytes_ / 1e6:.0f} MB"


def count(parameters: int) -> str:
    return f"{parameters / 1e9:.1f}B" if parameters >= 1e9 else f"{parameters / 1e6:.0f}M"


def run_models(args: argparse.Namespace) -> int:
    from agents.backends.registry import MODELS

    found = [describe(name) for name in MODELS]
    if args.as_json:
        for model in found:
            print(json.dumps(model))
        return exit_codes.OK
    rows = [
        [
            model["name"] + (" (default)" if model["default"] else ""),
            "yes" if model["installed"] else "no",
            f"yes, {size(model['folder_bytes'])}" if model["converted"] else "no",
            size(model["gguf_bytes"]),
            count(model["parameters"]),
            "instruct" if model["instruction_tuned"] else "base",
            model["licence"],
        ]
        for model in found
    ]
    headers = ["NAME", "INSTALLED", "CONVERTED", "GGUF", "PARAMS", "TUNED", "LICENCE"]
    print(table(headers, rows))
    for model in found:
        if not model["installed"]:
            print(f"to install {model['name']}: {model['install']}")
    return exit_codes.OK
