"""`agent-console doctor`: check what agent-console needs, one line per check, and say how
to fix each problem. Exit 0 when everything needed works, 1 otherwise. `--repair` also
writes back the work dirs a killed console left mounted."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from app import exit_codes

if TYPE_CHECKING:
    from agents.settings import Settings


def line(ok: bool, name: str, detail: str, fix: str | None = None) -> str:
    mark = "ok  " if ok else "FAIL"
    text = f"{mark} {name}: {detail}"
    if fix and not ok:
        text += f"\n     fix: {fix}"
    return text


def run_doctor(settings: Settings, repair: bool = False) -> int:
    from agents.sandbox import sandbox_status

    good = True
    sandbox = sandbox_status(refresh=True)
    good &= sandbox.ok
    print(line(sandbox.ok, "sandbox", sandbox.detail, sandbox.fix))
    good &= _stranded_work_dirs(settings, repair)

    from agents.backends import resolve

    kind, url, model = resolve(settings)
    if kind == "none":
        print(line(True, "model", "backend `none`: browse and label only"))
    elif kind == "openai":
        ok, detail = _server_answers(url, settings.request_timeout)
        good &= ok
        print(
            line(
                ok,
                "model",
                f"openai backend at {url or '(no --base-url)'}: {detail}",
                "start one with `agent-console serve`, or give --base-url",
            )
        )
    else:
        ok, detail = _model_loads(settings)
        good &= ok
        print(
            line(
                ok,
                "model",
                f"{kind} backend, {detail}",
                "give a model folder with --model PATH (`make install` fetches the offline "
                "model), or a running server with --base-url URL",
            )
        )
    if model or kind == "openai":
        ok, detail = offline_model_line(settings.model)
        print(line(ok, "offline model", detail, "make install"))

    from storage import StoreError, TraceStore

    try:
        with TraceStore(settings.database()) as store:
            health = store.health()
        ok = health.get("integrity", "ok") == "ok"
        good &= ok
        extras = ", ".join(f"{k} {v}" for k, v in health.items() if k != "where")
        print(line(ok, "trace store", f"{health['where']} ({extras})"))
    except StoreError as exc:
        good = False
        print(line(False, "trace store", str(exc)))
    print(line(True, "gpu", _gpus()))
    ok, detail = _disk(settings)
    good &= ok
    print(
        line(
            ok,
            "disk",
            detail,
            "free some space there, or point --db and XDG_DATA_HOME at a larger disk",
        )
    )
    sys.stdout.flush()
    return exit_codes.OK if good else exit_codes.FAILED


def _stranded_work_dirs(settings: Settings, repair: bool) -> bool:
    """A line for the sessions' work dirs a killed console left mounted (a tmpfs each,
    its memory held), if any; with `repair`, a line for each one written back. Whether
    none is left."""
    from agents.sandbox.workdir import stranded, write_back_stranded

    if not repair:
        left = stranded(settings.sessions_dir())
        if left:
            shown = ", ".join(map(str, left[:3])) + (", ..." if len(left) > 3 else "")
            detail = f"{len(left)} left mounted by a console that was killed: {shown}"
            fix = "`agent-console doctor --repair` writes them back and unmounts them"
            print(line(False, "work dirs", detail, fix))
        return not left
    good = True
    for path, problem in write_back_stranded(settings.sessions_dir()):
        good &= problem is None
        detail = problem or f"{path} written back and unmounted (a killed console had left it)"
        print(line(problem is None, "work dir", detail))
    return good


#: Below this much free space in the data folder, training and the store are at risk
#: (a LoRA checkpoint of a 7B model is a few hundred MB; a session's store rows add up).
MIN_FREE_BYTES = 2 * 1024**3


def offline_model_line(named: str = "") -> tuple[bool, str]:
    """The offline model `named` (one of `agent-console models`), else the default:
    converted, convertible, or missing."""
    from agents.backends.offline import status_line
    from agents.backends.registry import MODELS

    return status_line(name=named) if named in MODELS else status_line()


def _model_loads(settings: Settings) -> tuple[bool, str]:
    """Load the model as a session would (converting the offline model first when it
    must), then let it go: a name that is set is not a model that loads."""
    from agents.backends import BackendError, open_backend

    print("     loading the model to check it...", file=sys.stderr, flush=True)
    started = time.monotonic()
    try:
        backend = open_backend(
            settings, lambda step: print(f"     {step}", file=sys.stderr, flush=True)
        )
    except BackendError as exc:
        return False, str(exc)
    from agents.backends.offline import model_label

    try:
        took = time.monotonic() - started
        size = f", {backend.parameters / 1e6:.0f}M parameters" if backend.parameters else ""
        named = model_label(backend.model)
        return True, f"{named} loads on {backend.device} in {took:.1f} s{size}"
    finally:
        backend.close()


def _gpus() -> str:
    """What training and in-process models will run on: CUDA devices with their memory, or
    the CPU. Never a failure: everything runs on a CPU, slower."""
    try:
        import torch
    except ImportError:
        return "torch is not installed: models run on a server only"
    if not torch.cuda.is_available():
        return (
            f"none (torch {torch.__version__}, CUDA not available): the CPU trains and runs models"
        )
    names = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        names.append(f"{props.name} {props.total_memory / 1024**3:.0f} GiB")
    return f"{len(names)} CUDA device(s), CUDA {torch.version.cuda}: " + "; ".join(names)


def _disk(settings: Settings) -> tuple[bool, str]:
    import shutil

    from agents.settings import data_dir
    from storage.engine import database_url, sqlite_path

    folder = data_dir()
    try:
        path = sqlite_path(database_url(settings.database()))
    except Exception:  # the store line above has already said what is wrong with it
        path = None
    places = {str(folder): folder}
    if path is not None:
        places[str(path.parent)] = path.parent
    details = []
    ok = True
    for name, place in places.items():
        probe = place
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        free = shutil.disk_usage(probe).free
        ok &= free >= MIN_FREE_BYTES
        details.append(f"{free / 1024**3:.1f} GiB free in {name}")
    return ok, "; ".join(details) + ("" if ok else " (under 2 GiB)")


def _server_answers(url: str, timeout: float) -> tuple[bool, str]:
    if not url:
        return False, "no server URL"
    import json
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url.rstrip("/") + "/models", timeout=min(timeout, 5)) as reply:
            models = [m.get("id") for m in json.load(reply).get("data", [])]
        return True, f"serves {', '.join(map(str, models)) or 'no models'}"
    except (OSError, ValueError, urllib.error.URLError) as exc:
        return False, f"does not answer ({exc})"
