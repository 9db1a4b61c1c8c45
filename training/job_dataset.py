"""A job's dataset: its rows built once into the job's folder (`build_dataset`), loaded
with the columns trl trains on (`load_rows`), their prompts fitted to the job's
`max_length` (`fit_prompts`). `datasets` is imported inside the functions.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from storage import JobKind
from training.errors import TrainingError
from training.job_files import DATASET_NAME, job_dir
from training.jobs import JobOptions

if TYPE_CHECKING:
    from storage import Job, TraceStore

DATASET_REPORT = "dataset.json"
SFT_COLUMNS = ("prompt", "completion")
DPO_COLUMNS = ("prompt", "chosen", "rejected")
KTO_COLUMNS = ("prompt", "completion", "label")


def dataset_path(job: Job) -> Path:
    return job_dir(job) / DATASET_NAME


def build_dataset(store: TraceStore, job: Job, log: Callable[[str], None]) -> dict[str, Any]:
    """The job's rows, built once: a resumed job trains on the rows it started with.
    Returns the build report (rows, sessions, mismatches)."""
    from training.datasets import write_jsonl

    path = dataset_path(job)
    report_file = job_dir(job) / DATASET_REPORT
    if path.is_file() and report_file.is_file():
        report = json.loads(report_file.read_text(encoding="utf-8"))
        log(f"dataset: reusing {path} ({report['rows']} rows)")
        return dict(report)
    options = JobOptions.from_config(job.config)
    with contextlib.ExitStack() as stack:
        source = store
        if job.config.get("labels_db"):
            from storage import TraceStore

            log(f"dataset: the labels of {options.labels_from}")
            source = stack.enter_context(TraceStore(job.config["labels_db"]))
        built = write_jsonl(
            source,
            options.kind.value,
            path,
            since=options.since,
            session_ids=options.sessions,
            changed_only=options.changed_only,
        )
    report = {
        "path": str(path),
        "kind": options.kind.value,
        "rows": int(built.rows),
        "sessions": int(built.sessions),
        "mismatches": len(built.mismatches),
        "since": options.since,
        "summary": built.describe(),
    }
    for mismatch in list(built.mismatches)[:20]:
        log(f"dataset: left out {mismatch}")
    log(f"dataset: {built.describe()}")
    if report["rows"] == 0:
        raise TrainingError(
            f"the labels make no usable {options.kind.value} rows: {built.describe()}"
        )
    tmp = report_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=2), encoding="utf-8")
    os.replace(tmp, report_file)
    return report


def load_rows(path: Path, kind: JobKind, cache_dir: Path, tokenizer: Any = None) -> Any:
    """The JSONL as a `datasets.Dataset` with only the columns trl trains on: raw-text
    prompt/completion (prompt/chosen/rejected), trl's standard non-conversational form,
    so the loss falls on the completion only. A row of a block asked for in chat turns
    (`training.datasets.chat_prompt`) becomes text through `tokenizer`'s chat template:
    the prompt the turns rendered as the model saw them, the completion the reply with
    the template's end of turn, so one job can mix both kinds of session."""
    import datasets

    datasets.disable_progress_bars()
    columns = {JobKind.SFT: SFT_COLUMNS, JobKind.DPO: DPO_COLUMNS, JobKind.KTO: KTO_COLUMNS}[kind]
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            row = json.loads(line)
            missing = [c for c in columns if c not in row]
            if missing:
                raise TrainingError(f"{path}: row {number} lacks {', '.join(missing)}")
            if isinstance(row["prompt"], list):
                if tokenizer is None:
                    raise TrainingError(f"{path}: chat rows need the model's tokenizer")
                row = as_text(row, tokenizer)
            rows.append({c: row[c] for c in columns})
    if not rows:
        raise TrainingError(f"{path}: no rows")
    return datasets.Dataset.from_list(rows)


def as_text(row: dict[str, Any], tokenizer: Any) -> dict[str, Any]:
    """A conversational row as raw text through the model's chat template."""
    turns = row["prompt"]
    prompt = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    out = {**row, "prompt": prompt}
    for name in ("completion", "chosen", "rejected"):
        if name in row:
            whole = tokenizer.apply_chat_template(turns + row[name], tokenize=False)
            if not whole.startswith(prompt):
                raise TrainingError("the chat template renders a reply apart from its prompt")
            out[name] = whole[len(prompt) :]
    return out


def fit_prompts(rows: Any, tokenizer: Any, max_length: int) -> tuple[Any, int]:
    """Rows whose prompt and longest completion fit in `max_length` tokens: a longer
    prompt keeps its end (the block's own header and the context nearest it). trl cuts
    from the end (`keep_start`, its only mode), which would cut the completion, the part
    the loss is on. Returns the rows and how many prompts were cut."""
    completions = [c for c in ("completion", "chosen", "rejected") if c in rows.column_names]

    def length(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    def fit(row: dict[str, Any]) -> dict[str, Any]:
        # two special tokens (BOS, EOS) beside the text; at least a few tokens of prompt
        budget = max_length - 2 - max(length(row[c]) for c in completions)
        ids = tokenizer(row["prompt"], add_special_tokens=False)["input_ids"]
        if len(ids) <= budget:
            return {"prompt": row["prompt"], "cut": False}
        return {"prompt": tokenizer.decode(ids[-max(budget, 16) :]), "cut": True}

    fitted = rows.map(fit)
    cut = sum(fitted["cut"])
    return fitted.remove_columns(["cut"]), cut
