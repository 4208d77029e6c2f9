"""Running code that cera does not control (a plugin's import, hooks and probes) with a
time limit, catching everything it raises.

The code runs in a daemon thread; the caller waits at most the limit. A thread cannot be
stopped from outside, so code that overruns keeps running in the background and its
result is ignored; being a daemon, it never keeps the process alive. Every exception is
caught, `SystemExit` and `KeyboardInterrupt` raised by the code included (a plugin must
not end the program): only the interpreter exiting, or the code killing the process,
gets past.

Cheap to import: the standard library only.
"""

from __future__ import annotations

import threading
from typing import Any

_tls = threading.local()


class TimedOut(Exception):
    """The code did not finish within its limit (it may still be running)."""


class Failed(Exception):
    """The code raised; ``error`` is what it raised (any BaseException)."""

    def __init__(self, error: BaseException):
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error


def in_limited_call() -> bool:
    """True inside code that `call` is running (for instance a plugin being imported)."""
    return getattr(_tls, "active", False)


def call(fn, *args, seconds: float | None, name: str = "cera-limited-call", **kwargs) -> Any:
    """``fn(*args, **kwargs)``, within ``seconds`` (None: no limit, but still in a thread,
    so that whatever it raises is caught the same way). Raises `TimedOut` or `Failed`."""
    done, box = start(fn, *args, name=name, **kwargs)
    if not done.wait(seconds):
        raise TimedOut(f"did not finish within {seconds:g} s")
    if "error" in box:
        raise Failed(box["error"])
    return box.get("value")


def start(fn, *args, name: str = "cera-limited-call", **kwargs) -> tuple[threading.Event, dict]:
    """Start ``fn`` in a daemon thread and return (done event, result box) without waiting:
    for running several at once (the box gets "value" or "error")."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def run():
        _tls.active = True
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001
            box["error"] = e
        finally:
            done.set()

    threading.Thread(target=run, name=name, daemon=True).start()
    return done, box
