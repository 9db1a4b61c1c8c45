"""HumanEval (or a JSON-lines suite in its format) through the agent, beside the same model
alone, on the same problems in one run.

Run: `.venv/bin/python bench/humaneval.py [--suite humaneval:held-out] [--modes plain,agent]
[--model qwen2.5-coder-0.5b] [--ticks 3] [--limit N] [--work bench/results/humaneval]
[--server URL --workers 4]`.

- `plain`: the model alone: one greedy answer through its chat template to evalplus's
  instruction for chat models ("Please provide a self-contained Python script that solves
  the following problem in a markdown code block"), its first code block taken as the
  answer, and the prompt plus the answer tested as the official harness does.
- `agent`: the console's runtime on the problem's task (`agents.tasks.suites`): the product's
  defaults for the model, approval `auto`, memory off, at most `--ticks` ticks; the tests
  are hidden from it (a blind task), and it stops when its own evaluations pass.
- `server`: the same sessions as a batch (`agents.batch`, `--workers` at a time) against
  the model served at `--server` (`agent-console serve`), with the product's defaults for
  a server; the figure is sessions per hour beside the in-process agent's, on the same
  problems.

Both are judged by the same check, in the checker's sandbox: the problem's own tests
against solution.py. Per mode: pass@1 with a 95% Wilson interval, the median seconds and
tokens per problem; for the agent also the problems whose tests passed at some tick (had
it been told: not a pass@1) and where the runs differ. `--suite humaneval:held-out` is
every 4th problem from HumanEval/0 (41 problems), the set issue figures use; `humaneval`
is all 164. Results are kept under `--work` (plain answers in plain.jsonl, the agent's
rows in agent.jsonl with its runtime's version, its sessions in traces.db): a stopped run
resumes, from a fresh clone too (the rows are committed; the trace store and work dirs
are not). Figures go to stdout and `<work>/humaneval.json`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents import blocks
from agents.batch import wilson
from agents.runtime import RunOptions, Runtime, session_solved
from agents.settings import Settings
from agents.tasks.suites import (
    Problem,
    parse_ref,
    plain_answer,
    plain_solution,
    problem_task,
    select,
    verdict,
)
from storage import NodeStatus, SessionStatus, TraceStore


def read_kept(path: Path) -> dict[str, dict]:
    """What an earlier run kept, by task id (a stopped run resumes)."""
    if not path.exists():
        return {}
    rows = (json.loads(line) for line in path.read_text().splitlines())
    return {row["task_id"]: row for row in rows}


#: Pauses of a run, one a line (`START END`, epoch seconds): whoever stops the bench's
#: processes (SIGSTOP) to use the machine for something else writes one here before
#: letting them go on (SIGCONT), and the rows count only the time the bench ran.
PAUSES = "pauses.log"


def running_seconds(folder: Path, started: float, now: float | None = None) -> float:
    """Seconds from `started` to `now` (epoch; default: now) that the bench ran: the
    pauses logged in the run's folder left out."""
    now = time.time() if now is None else now
    paused = 0.0
    path = folder / PAUSES
    if path.exists():
        for line in path.read_text().splitlines():
            start, end = (float(x) for x in line.split()[:2])
            paused += max(0.0, min(end, now) - max(start, started))
    return round(now - started - paused, 1)


def run_plain(backend: Any, problems: list[Problem], suite: Any, folder: Path) -> list[dict]:
    kept_path = folder / "plain.jsonl"
    kept = read_kept(kept_path)
    rows = []
    for problem in problems:
        row = kept.get(problem.task_id)
        if row is None:
            started = time.time()
            reply = plain_answer(backend, problem)
            row = {
                "task_id": problem.task_id,
                "seconds": running_seconds(folder, started),
                "tokens": len(reply.token_ids),
                "reply": reply.text,
            }
            with kept_path.open("a") as out:
                out.write(json.dumps(row) + "\n")
        # judged on every run (a kept answer is judged as the code judges now)
        ok, why = verdict(problem_task(suite, problem), plain_solution(problem, row["reply"]))
        row = {**row, "passed": ok, "why": why}
        rows.append(row)
        print(f"  plain {problem.task_id} {row['passed']} {row['seconds']} s", flush=True)
    return rows


class RuntimeVersion:
    """The version of the agent's code the rows come from: a digest of the source of every
    agents module the bench process has loaded once a session has run (what the runtime
    ran), kept with the list of those modules in agent-runtime.json. A later run reads the
    same files again: a change to code the runtime does not run (the console's) keeps it."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "agent-runtime.json"
        self.kept = json.loads(self.path.read_text()) if self.path.exists() else None
        self.digest: str | None = None

    def kept_now(self) -> str | None:
        """The kept version's digest of the files as they are now (None: none kept)."""
        return digest(self.kept["modules"]) if self.kept else None

    def current(self) -> str:
        """This process's version, fixed when first asked (after its first session)."""
        if self.digest is None:
            modules = sorted(
                str(Path(m.__file__).resolve().relative_to(ROOT))
                for name, m in list(sys.modules.items())
                if (name == "agents" or name.startswith("agents.")) and getattr(m, "__file__", None)
            )
            self.digest = digest(modules)
            if self.kept is None or self.kept["digest"] != self.digest:
                self.kept = {"digest": self.digest, "modules": modules}
                self.path.write_text(json.dumps(self.kept, indent=1) + "\n")
        return self.digest


ROOT = Path(__file__).resolve().parents[1]


def digest(modules: list[str]) -> str:
    import hashlib

    sha = hashlib.sha256()
    for name in modules:
        path = ROOT / name
        sha.update(name.encode() + b"\0" + (path.read_bytes() if path.exists() else b"gone"))
    return sha.hexdigest()[:12]


def run_agent(
    backend: Any, problems: list[Problem], suite: Any, folder: Path, ticks: int
) -> list[dict]:
    """The agent's sessions, one a problem. A kept row of another runtime
    (`RuntimeVersion`) is set aside (agent-RUNTIME.jsonl): the figure is of one runtime. A kept row carries its verdict,
    so a run resumes from the rows alone where the trace store is gone (a fresh clone)."""
    kept_path = folder / "agent.jsonl"
    kept = read_kept(kept_path)
    version = RuntimeVersion(folder)
    now = version.kept_now()
    other = {r.get("runtime", "unknown") for r in kept.values()} - {now}
    if other:
        aside = folder / f"agent-{'-'.join(sorted(other))}.jsonl"
        kept_path.rename(aside)
        print(f"  kept rows of another runtime ({', '.join(sorted(other))}) set aside: {aside}")
        kept = {}
    rows = []
    with TraceStore(folder / "traces.db") as store:
        for problem in problems:
            task = problem_task(suite, problem)
            run = kept.get(problem.task_id)
            if run is None:
                options = RunOptions.from_settings(
                    Settings(), backend, approval="auto", max_ticks=ticks, memory=False, seed=0
                )
                started = time.time()
                outcome = Runtime(store, backend, task, options, sessions_dir=folder / "s").run()
                wall = time.time() - started
                ran = running_seconds(folder, started, started + wall)
                run = {
                    "task_id": problem.task_id,
                    "runtime": version.current(),
                    "session": outcome.session_id,
                    "seconds": ran,
                    "paused_s": round(wall - ran, 1),
                    "tokens": outcome.tokens,
                    "status": outcome.status.value,
                    **judge(store, outcome.session_id),
                }
                if outcome.status is not SessionStatus.ABORTED:
                    with kept_path.open("a") as out:
                        out.write(json.dumps(run) + "\n")
            else:
                stored = store.sessions_by_id([run["session"]]).get(run["session"])
                if stored is not None and stored.task == task.prompt:  # the row's own session
                    run = {**run, **judge(store, run["session"])}  # judged as code judges now
            rows.append(run)
            print(f"  agent {json.dumps(rows[-1])}", flush=True)
    return rows


def run_server(
    url: str, problems: list[Problem], suite: Any, folder: Path, ticks: int, workers: int
) -> dict[str, Any]:
    """The problems as one batch, `workers` sessions at a time, against the served model
    (whose name is the converted folder's path, so its registry defaults apply)."""
    from agents import batch as b
    from agents.backends.openai_backend import OpenAIBackend

    backend = OpenAIBackend(url, str(model_folder(folder.name)), timeout=900)
    path = folder / f"server-{workers}.db"
    path.unlink(missing_ok=True)  # sessions per hour need one uninterrupted batch
    try:
        with TraceStore(path) as store:
            options = RunOptions.from_settings(
                Settings(), backend, approval="auto", max_ticks=ticks, memory=False, seed=0
            )
            specs = [{"task": suite.ref(p)} for p in problems]
            batch = b.start_batch(store, "bench", {"workers": workers}, read=(specs, "bench"))
            context = b.WorkerContext(store, backend, options, folder / f"s-server-{workers}")
            started = time.perf_counter()
            b.run_local(context, batch.id, workers)
            seconds = time.perf_counter() - started
            rows = []
            for task in store.batch_tasks(batch.id):
                assert task.session_id is not None, task
                rows.append(
                    {
                        "task_id": task.spec["task"],
                        "session": task.session_id,
                        "seconds": round(task.result.get("seconds", 0.0), 1),
                        "tokens": task.result.get("tokens"),
                        **judge(store, task.session_id),
                    }
                )
    finally:
        backend.close()
    return {
        "workers": workers,
        "options": options.snapshot(),
        "wall_s": round(seconds, 1),
        "sessions_per_hour": round(len(rows) * 3600 / seconds, 1),
        "rows": rows,
    }


def model_folder(name: str) -> Path:
    from agents.backends.offline import ensure_model

    return ensure_model(print, name=name)


def judge(store: TraceStore, session_id: int) -> dict[str, Any]:
    """The session's verdict, and per tick: whether an action ran, whether the hidden tests
    passed after it, and whether the model's own evaluations (at least one) all passed."""
    tree = store.tree(session_id)
    ticks = []
    for outcome in (n for n in tree if n.kind == blocks.OUTCOME):
        meta = outcome.meta
        hidden = bool(meta.get("task_total")) and meta["task_passed"] == meta["task_total"]
        own_total = int(meta.get("total", 0)) - int(meta.get("task_total", 0))
        own_passed = int(meta.get("passed", 0)) - int(meta.get("task_passed", 0))
        ran = any(
            n.kind == blocks.ACTION and n.tick == outcome.tick and n.status is NodeStatus.EXECUTED
            for n in tree
        )
        ticks.append(
            {"ran": ran, "hidden": hidden, "own": own_total > 0 and own_passed == own_total}
        )
    return {
        "passed": session_solved(store, session_id),
        "passed_at_some_tick": any(t["hidden"] for t in ticks),
        "ticks": len(ticks),
        "by_tick": ticks,
    }


def steps(rows: list[dict]) -> dict[str, int]:
    """Which step loses: the first action, the model's own evaluation as a judge of the
    hidden tests, and what later ticks did."""
    out = {
        "first_action_right": 0,
        "own_pass_right": 0,
        "own_pass_wrong": 0,
        "own_fail_right": 0,
        "own_fail_wrong": 0,
        "later_fixed": 0,
        "later_broke": 0,
    }
    for row in rows:
        ticks = row["by_tick"]
        if not ticks:
            continue
        out["first_action_right"] += ticks[0]["hidden"]
        for tick in ticks:
            key = ("own_pass_" if tick["own"] else "own_fail_") + (
                "right" if tick["own"] == tick["hidden"] else "wrong"
            )
            out[key] += 1
        for before, after in itertools.pairwise(ticks):
            out["later_fixed"] += not before["hidden"] and after["hidden"]
            out["later_broke"] += before["hidden"] and not after["hidden"]
    return out


def rate(part: int, whole: int) -> str:
    if not whole:
        return "-"
    low, high = wilson(part, whole)
    return f"{part}/{whole} ({100 * part / whole:.1f}%, {100 * low:.0f}-{100 * high:.0f})"


def median(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return round(statistics.median(values), 1) if values else None


def plot(modes: dict[str, dict[str, bool]]) -> str:
    """A text plot for the docs: a column per problem, `#` passed, `.` failed."""
    ids = list(next(iter(modes.values())))
    numbers = [task_id.rsplit("/", 1)[-1] for task_id in ids]
    lines = [f"{'':6} first {numbers[0]}, last {numbers[-1]}, every problem one column"]
    for mode, passed in modes.items():
        marks = "".join("#" if passed.get(t) else "." for t in ids)
        lines.append(f"{mode:6} {marks}  {sum(passed.get(t, False) for t in ids)}/{len(ids)}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", default="humaneval:held-out")
    parser.add_argument("--modes", default="plain,agent")
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--ticks", type=int, default=3)
    parser.add_argument("--limit", type=int, default=0, help="only the first N problems")
    parser.add_argument("--work", type=Path, default=Path("bench/results/humaneval"))
    parser.add_argument("--server", metavar="URL", help="the `server` mode's model server")
    parser.add_argument("--workers", type=int, default=4, help="the `server` mode's sessions")
    args = parser.parse_args()

    from agents.backends.transformers_backend import TransformersBackend

    chosen = select(args.suite)
    suite = parse_ref(args.suite)[0]
    problems = [suite.find(ref.rsplit(":", 1)[-1]) for ref in chosen.refs]
    problems = problems[: args.limit] if args.limit else problems
    folder = args.work / args.model
    folder.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "suite": chosen.spec,
        "model": args.model,
        "ticks": args.ticks,
        "problems": [p.task_id for p in problems],
    }
    modes = args.modes.split(",")
    if "server" in modes:
        if not args.server:
            sys.exit("the server mode needs --server URL (a running `agent-console serve`)")
        served = run_server(args.server, problems, suite, folder, args.ticks, args.workers)
        passed = sum(r["passed"] for r in served["rows"])
        served["pass@1"] = rate(passed, len(served["rows"]))
        kept = {k: v for k, v in served.items() if k not in ("rows", "options")}
        print(f"| {args.model} | server | {json.dumps(kept)} |", flush=True)
        name = f"humaneval-server-{args.workers}.json"
        (folder / name).write_text(json.dumps({**results, "server": served}, indent=2) + "\n")
        modes = [m for m in modes if m != "server"]
        if not modes:
            return
    backend = TransformersBackend(str(model_folder(args.model)))
    try:
        for mode in modes:
            if mode == "plain":
                rows = run_plain(backend, problems, suite, folder)
            else:
                rows = run_agent(backend, problems, suite, folder, args.ticks)
            results[mode] = {
                "pass@1": rate(sum(r["passed"] for r in rows), len(rows)),
                "median_s": median(rows, "seconds"),
                "median_tokens": median(rows, "tokens"),
                "rows": rows,
            }
            if mode == "agent":
                results[mode]["passed_at_some_tick"] = rate(
                    sum(r["passed_at_some_tick"] for r in rows), len(rows)
                )
                results[mode]["steps"] = steps(rows)
                total = sum(r["seconds"] for r in rows)
                results[mode]["sessions_per_hour"] = round(len(rows) * 3600 / total, 1)
            brief = {k: v for k, v in results[mode].items() if k != "rows"}
            print(f"| {args.model} | {mode} | {json.dumps(brief)} |", flush=True)
            (folder / "humaneval.json").write_text(json.dumps(results, indent=2) + "\n")
    finally:
        backend.close()
    if "plain" in results and "agent" in results:
        plain = {r["task_id"]: r["passed"] for r in results["plain"]["rows"]}
        agent = {r["task_id"]: r["passed"] for r in results["agent"]["rows"]}
        print(plot({"plain": plain, "agent": agent}))
        print("agent only:", [t for t in agent if agent[t] and not plain.get(t)])
        print("plain only:", [t for t in agent if plain.get(t) and not agent[t]])


if __name__ == "__main__":
    main()
