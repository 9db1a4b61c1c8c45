"""`agent-console doctor`: check what agent-console needs, one line per check, and say how
to fix each problem. Exit 0 when everything needed works, 1 otherwise."""

from __future__ import annotations

import sys
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


def run_doctor(settings: Settings) -> int:
    from agents.sandbox import sandbox_status

    good = True
    sandbox = sandbox_status(refresh=True)
    good &= sandbox.ok
    print(line(sandbox.ok, "sandbox", sandbox.detail, sandbox.fix))

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
        from agents.backends import DEFAULT_MODEL, BackendError
        from agents.serving import check_model_available

        name = model or DEFAULT_MODEL
        try:
            check_model_available(name)
            print(line(True, "model", f"{kind} backend, model {name}"))
        except BackendError as exc:
            good = False
            print(line(False, "model", str(exc)))

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
    sys.stdout.flush()
    return exit_codes.OK if good else exit_codes.FAILED


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
