"""Console responsiveness at trace size: cold start of the real command, and key press to
frame on 10,000- and 50,000-block sessions.

Run: `.venv/bin/python bench/tui.py` (part of `make bench`). Goals: cold start to the
first frame < 0.5 s; every key (and a live block arriving) < 50 ms to its frame.

Cold start. `.venv/bin/agent-console --db FILE --backend none` is spawned in a
pseudo-terminal (160x48 set with TIOCSWINSZ, TERM=xterm-256color, empty XDG config and
data folders, no AGENT_CONSOLE_* variables). Timed from just before the spawn to the read
that brings the first frame, i.e. the first output in which, with escape sequences
removed, the title "agent-console" appears; "sessions" is the time until the stored
session's title is on the screen too (the list is read in a worker after the first frame).
Then ctrl+q (q as a fallback) and the process is reaped. 5 runs per store: an empty store
and one holding a 50,000-block session.

Keys. Each size runs in a fresh Python process that opens the store and runs the real
`ConsoleApp(store=..., settings=Settings(backend="none"))` in process at 160x48 with
Textual's headless driver, changed in one way: it reports that it is not headless, so the
app renders every frame into terminal escape sequences exactly as it does for a terminal
(the headless driver skips that step), and the driver's `flush()` - which `App._display`
calls once per frame, after writing it - records the time. A key is sent the way a
terminal's keys arrive, `driver.send_message(events.Key(...))` from the event loop (what
the real input thread and Pilot do), and timed from that call to:
  frame    - the first frame flushed after it (what the operator first sees change);
  settled  - the last frame of the update: after the first frame the bench waits for the
             app's workers and animations to finish and then for 100 ms without a frame;
             the time of the last frame before that quiet spell is "settled" (the detail
             panes and the inspector, filled by workers, land here). The waiting is not
             timed; Pilot is not used, so its ~80 ms per press is not in the figures.
  frames   - how many frames the update took (median).
The session (stored as running) is opened with space (timed once: a load), then: down
x30 from the top; space x60 on a tick in the middle (expand, collapse); end and home x30
each; and 30 live blocks: each is stored first (as the runtime does), then timed from the
call to `TraceTree.add_live_nodes(session_id, [node])`, appended to the last tick, which
is open with the cursor on the last line. Moving the cursor into place between cases is
not timed. A press that draws no frame within 3 s is counted as such.
Nothing is tuned for the bench: no `gc.freeze()` or animation setting of its own; the
table says whether the app froze its objects after the load.
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import fcntl
import gc
import json
import math
import os
import re
import select
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from storage import NewNode, Node, NodeStatus, SessionStatus, TraceStore  # noqa: E402
from tests.support.traces import build_session  # noqa: E402

COLUMNS, ROWS = 160, 48
SIZES = (10_000, 50_000)
PRESSES = 30
COLD_RUNS = 5
QUIET = 0.1  # seconds without a frame that end an update
FRAME_TIMEOUT = 3.0
KEY_GOAL_MS = 50.0
LOADS = {"open session (space)"}  # timed and shown, but a load, not a key
COLD_GOAL_S = 0.5
TITLE = "agent-console"
# CSI (with private and intermediate bytes), OSC (BEL or ST ended), and 2-byte escapes.
ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# The weave order new blocks follow in the live-append case.
TICK_ORDER = [
    "task-reminder",
    "observation",
    "orientation",
    "action",
    "expectation",
    "option",
    "evaluation",
    "outcome",
]


def session_title(blocks: int) -> str:
    return f"Bench trace of {blocks:,} blocks"


def clean_env(home: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AGENT_CONSOLE_", "TEXTUAL")) and k not in ("COLUMNS", "LINES")
    }
    env.update(
        TERM="xterm-256color",
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_DATA_HOME=str(home / "data"),
    )
    return env


# -- cold start in a pseudo-terminal ----------------------------------------------------


@dataclass
class Screen:
    """What the console has written to the terminal so far, escape sequences removed."""

    master: int
    raw: str = ""
    decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="replace")
    )
    closed: bool = False

    def read(self, timeout: float) -> bool:
        """Read what is there (waiting up to `timeout`); False once the child is gone."""
        if self.closed:
            return False
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 1 << 16)
        except OSError:  # EIO: the child's side is closed
            chunk = b""
        if not chunk:
            self.closed = True
            return False
        self.raw += self.decoder.decode(chunk)
        return True

    @property
    def text(self) -> str:
        return ESCAPES.sub("", self.raw)

    def wait_for(self, needle: str, deadline: float) -> float | None:
        """perf_counter() at the read that made `needle` visible, or None."""
        while needle not in self.text:
            if time.perf_counter() > deadline or not self.read(0.05):
                return None
        return time.perf_counter()


def cold_start(db: Path, home: Path, expect: str | None) -> tuple[float, float | None]:
    """Seconds from spawn to the first frame, and to `expect` (a session title) shown."""
    exe = Path(sys.executable).with_name("agent-console")
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    start = time.perf_counter()
    proc = subprocess.Popen(
        [str(exe), "--db", str(db), "--backend", "none"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=clean_env(home),
        cwd=home,
        start_new_session=True,
    )
    os.close(slave)
    screen = Screen(master)
    try:
        frame = screen.wait_for(TITLE, start + 30)
        if frame is None:
            raise SystemExit(f"no first frame from agent-console:\n{screen.text[-2000:]}")
        shown = screen.wait_for(expect, start + 30) if expect else None
        quit_console(proc, screen)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return frame - start, None if shown is None else shown - start


def quit_console(proc: subprocess.Popen[bytes], screen: Screen) -> None:
    """ctrl+q, then q, then SIGTERM; the terminal is drained meanwhile so the console
    never blocks writing its last frames."""
    for keys in (b"\x11", b"q", None):
        if keys is None:
            proc.send_signal(signal.SIGTERM)
        else:
            os.write(screen.master, keys)
        deadline = time.perf_counter() + 10
        while proc.poll() is None and time.perf_counter() < deadline:
            screen.read(0.05)
        if proc.poll() is not None:
            break
    proc.wait(timeout=10)
    if proc.returncode != 0:
        print(f"  (agent-console exited {proc.returncode})")


# -- key press to frame, in process --------------------------------------------------------


@dataclass
class Timing:
    frame: list[float] = field(default_factory=list)
    settled: list[float] = field(default_factory=list)
    frames: list[int] = field(default_factory=list)  # frames drawn for each update
    missed: int = 0  # presses that drew no frame within FRAME_TIMEOUT


async def run_keys(db: Path, blocks: int) -> dict[str, Any]:
    """Drive the real ConsoleApp on `db`; returns the figures and the app's state."""
    from textual import events
    from textual.drivers.headless_driver import HeadlessDriver
    from textual.pilot import Pilot
    from textual.widgets import Tree

    from agents.settings import Settings
    from app.console import ConsoleApp

    class FrameDriver(HeadlessDriver):
        """The headless driver, except that the app renders real frames for it."""

        latest: FrameDriver | None = None

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.frames: list[float] = []
            self.bytes = 0
            self.waiter: asyncio.Future[None] | None = None
            FrameDriver.latest = self

        @property
        def is_headless(self) -> bool:
            return False

        def write(self, data: str) -> None:
            self.bytes += len(data)

        def flush(self) -> None:
            self.frames.append(time.perf_counter())
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_result(None)

    store = TraceStore(db)
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    # The driver App.__init__ took from `driver_class=` (ConsoleApp passes none); a
    # subclass would move CSS_PATH's folder, so the instance is left as it is otherwise.
    app.driver_class = FrameDriver
    report: dict[str, Any] = {"blocks": blocks, "timings": {}, "notes": []}
    timings: dict[str, Timing] = report["timings"]

    async def scenario(pilot: Pilot[object]) -> None:
        try:
            await drive(pilot)
        finally:
            app.exit()

    async def settle(driver: FrameDriver) -> None:
        deadline = time.perf_counter() + 30
        while time.perf_counter() < deadline:
            await app.workers.wait_for_complete()
            await app.animator.wait_until_complete()
            count = len(driver.frames)
            await asyncio.sleep(QUIET)
            if len(driver.frames) == count and not any(w.is_running for w in app.workers):
                return
        report["notes"].append("an update did not settle within 30 s")

    async def timed(name: str | None, act: Callable[[], object]) -> None:
        """Time `act` to its frames under `name`; None: a set-up step, not recorded."""
        driver = FrameDriver.latest
        assert driver is not None
        timing = timings.setdefault(name, Timing()) if name else Timing()
        seen = len(driver.frames)
        driver.waiter = asyncio.get_running_loop().create_future()
        start = time.perf_counter()
        act()
        try:
            await asyncio.wait_for(asyncio.shield(driver.waiter), FRAME_TIMEOUT)
        except TimeoutError:
            timing.missed += 1
            return
        finally:
            driver.waiter = None
        timing.frame.append(driver.frames[seen] - start)
        await settle(driver)
        timing.settled.append(driver.frames[-1] - start)
        timing.frames.append(len(driver.frames) - seen)

    async def press(name: str | None, key: str, character: str | None = None) -> None:
        driver = FrameDriver.latest
        assert driver is not None
        await timed(name, lambda: driver.send_message(events.Key(key, character)))

    async def drive(pilot: Pilot[object]) -> None:
        driver = FrameDriver.latest
        assert driver is not None
        deadline = time.perf_counter() + 30
        while not app.screen.query("#trace-tree"):  # the main screen is still composing
            if time.perf_counter() > deadline:
                raise SystemExit("the console never showed #trace-tree")
            await pilot.pause(0.05)
        tree = app.screen.query_one("#trace-tree", Tree)
        report["tree"] = type(tree).__name__
        while not (tree.root.children and tree.root.children[0].allow_expand):
            if time.perf_counter() > deadline:
                raise SystemExit("the console never listed the session")
            await pilot.pause(0.05)
        session_node = tree.root.children[0]
        tree.move_cursor(session_node)
        await settle(driver)

        # open the session (one sample: it loads the whole session from the store)
        await press("open session (space)", "space", " ")
        if not session_node.is_expanded or not session_node.children:
            raise SystemExit("space did not open the session")
        report["frozen"] = gc.get_freeze_count()
        report["lines_after_open"] = tree.last_line + 1

        for _ in range(PRESSES):
            await press("down", "down")
        report["cursor_after_down"] = tree.cursor_line

        ticks = [c for c in session_node.children if str(c.label).startswith("tick")]
        report["ticks"] = len(ticks)
        tick = ticks[len(ticks) // 2]
        tree.move_cursor(tick)
        tree.scroll_to_node(tick, animate=False)
        await settle(driver)
        for _ in range(2 * PRESSES):
            was_open = tick.is_expanded
            await press(
                "collapse tick (space)" if was_open else "expand tick (space)", "space", " "
            )
            if tick.is_expanded == was_open:
                raise SystemExit(f"space did not toggle {tick.label}")
            if tick.is_expanded and not tick.children:
                raise SystemExit(f"{tick.label} opened empty")
        if not tick.is_expanded:  # leave it open: it is in the line counts below
            await press(None, "space", " ")
        report["lines_with_tick"] = tree.last_line + 1

        for _ in range(PRESSES):
            await press("end", "end")
            if tree.cursor_line != tree.last_line:
                raise SystemExit("end did not reach the last line")
            await press("home", "home")
            if tree.cursor_line != 0:
                raise SystemExit("home did not reach the first line")

        add_live = getattr(tree, "add_live_nodes", None)
        if add_live is None:
            report["notes"].append(
                f"live append NOT MEASURED: {type(tree).__name__} has no add_live_nodes"
            )
            return
        session_id = store.list_sessions(limit=1)[0].id
        last = [n for n in store.tree(session_id) if n.status is not NodeStatus.ALTERNATE][-1]
        last_tick = ticks[-1]
        if not last_tick.is_expanded:  # the operator watches the tick being written
            tree.move_cursor(last_tick)
            await press(None, "space", " ")
        await press(None, "end")
        for i in range(PRESSES):
            last = store.add_node(session_id, next_block(last, i))
            await timed("live block (add_live_nodes)", partial(add_live, session_id, [last]))
        report["lines_after_live"] = tree.last_line + 1

    try:
        await app.run_async(headless=False, size=(COLUMNS, ROWS), mouse=False, auto_pilot=scenario)
    finally:
        store.close()
    if app.return_code:
        raise SystemExit(f"the console failed (exit {app.return_code})")
    report["timings"] = {
        name: {"frame": t.frame, "settled": t.settled, "frames": t.frames, "missed": t.missed}
        for name, t in timings.items()
    }
    return report


def next_block(last: Node, i: int) -> NewNode:
    """The block the runtime would write after `last`, in the weave order, kept in the
    same tick: the tick the operator has open (a new tick arrives collapsed, so blocks
    added to it change nothing on the screen but that tick's line)."""
    kind = last.kind if last.kind in TICK_ORDER else "expectation"
    nxt = TICK_ORDER[(TICK_ORDER.index(kind) + 1) % len(TICK_ORDER)]
    return NewNode(
        kind=nxt,
        text=f"live block {i}: written while the bench watched",
        tick=last.tick,
        parent_id=last.id,
        status=NodeStatus.CHOSEN,
    )


# -- report --------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def fmt(values: list[float]) -> str:
    if not values:
        return f"{'-':>6} {'-':>6} {'-':>6}"
    ms = [v * 1000 for v in values]
    return f"{statistics.median(ms):>6.1f} {pct(ms, 0.95):>6.1f} {max(ms):>6.1f}"


def print_keys(report: dict[str, Any]) -> dict[str, list[str]]:
    """One size's table; returns the keys whose p95 is over the goal, by measure."""
    over: dict[str, list[str]] = {"frame": [], "settled": []}
    frozen = report.get("frozen", 0)
    print(
        f"\n{report['blocks']:,}-block session: tree {report.get('tree')}, "
        f"{report.get('ticks', '?')} ticks, {report.get('lines_after_open', '?')} lines after "
        f"opening, {report.get('lines_with_tick', '?')} with a tick open; "
        + (f"the app froze {frozen:,} objects" if frozen else "the app did NOT gc.freeze()")
    )
    print(f"  {'':<28} {'n':>3}  frame ms: p50    p95    max  settled: p50    p95    max  frames")
    for name, t in report["timings"].items():
        n = len(t["frame"])
        frames = statistics.median(t["frames"]) if t["frames"] else 0
        missed = f"  ({t['missed']} drew no frame)" if t["missed"] else ""
        print(
            f"  {name:<28} {n:>3}  {'':>9}{fmt(t['frame'])}  {'':>8}{fmt(t['settled'])}"
            f"  {frames:>6g}{missed}"
        )
        if name in LOADS:
            continue
        for measure in over:
            if t["missed"] or (t[measure] and pct(t[measure], 0.95) * 1000 > KEY_GOAL_MS):
                over[measure].append(f"{name} at {report['blocks']:,}")
    for note in report["notes"]:
        print(f"  note: {note}")
    return over


def child_keys(db: Path, blocks: int) -> dict[str, Any]:
    """One size, in a fresh process: nothing of the other size's load is in its heap."""
    with tempfile.TemporaryDirectory() as home:
        done = subprocess.run(
            [sys.executable, __file__, "--keys", str(db), str(blocks)],
            env=clean_env(Path(home)),
            capture_output=True,
            text=True,
            timeout=1800,
        )
    if done.returncode != 0:
        raise SystemExit(f"the key bench at {blocks:,} blocks failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        type=lambda v: [int(x) for x in v.split(",")],
        default=list(SIZES),
        help="session sizes in blocks, comma-separated (default: 10000,50000)",
    )
    parser.add_argument("--keys", nargs=2, metavar=("DB", "BLOCKS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.keys:
        print(json.dumps(asyncio.run(run_keys(Path(args.keys[0]), int(args.keys[1])))))
        return
    sizes: list[int] = args.sizes

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        empty = folder / "empty.db"
        TraceStore(empty).close()
        dbs = {}
        for blocks in sizes:
            dbs[blocks] = folder / f"trace-{blocks}.db"
            start = time.perf_counter()
            with TraceStore(dbs[blocks]) as store:
                build_session(
                    store, blocks=blocks, title=session_title(blocks), status=SessionStatus.RUNNING
                )
            print(f"built a {blocks:,}-block session in {time.perf_counter() - start:.1f} s")

        home = folder / "home"
        home.mkdir()
        print(f"\ncold start, `agent-console --db FILE --backend none` in a {COLUMNS}x{ROWS} pty:")
        cold_over = []
        for label, db, expect in (
            ("empty store", empty, None),
            (f"{sizes[-1]:,}-block session", dbs[sizes[-1]], session_title(sizes[-1])),
        ):
            runs = [cold_start(db, home, expect) for _ in range(COLD_RUNS)]
            frames = [r[0] for r in runs]
            line = (
                f"  {label:<22} first frame {frames[0] * 1000:>5.0f} ms first run, "
                f"{statistics.median(frames) * 1000:>5.0f} ms median"
            )
            shown = [r[1] for r in runs if r[1] is not None]
            if expect:
                line += (
                    f"; session listed {statistics.median(shown) * 1000:.0f} ms median"
                    if len(shown) == len(runs)
                    else "; the session was NOT listed within 30 s"
                )
            print(line)
            if statistics.median(frames) > COLD_GOAL_S:
                cold_over.append(label)
        print(f"  goal: first frame < {COLD_GOAL_S * 1000:.0f} ms")

        print(
            f"\nkey press to frame, {COLUMNS}x{ROWS}, {PRESSES} presses a key "
            "(frame: first frame after the key; settled: the update's last frame)"
        )
        over: dict[str, list[str]] = {"frame": [], "settled": []}
        for blocks in sizes:
            for measure, keys in print_keys(child_keys(dbs[blocks], blocks)).items():
                over[measure] += keys
        print(
            f"\ngoals: cold start to the first frame < {COLD_GOAL_S * 1000:.0f} ms; every key "
            f"< {KEY_GOAL_MS:.0f} ms to its frame (p95; opening a session is a load, not a key)"
        )
        print("  cold start over: " + (", ".join(cold_over) or "none"))
        print("  first frame p95 over: " + (", ".join(over["frame"]) or "none"))
        print("  settled p95 over: " + (", ".join(over["settled"]) or "none"))


if __name__ == "__main__":
    main()
