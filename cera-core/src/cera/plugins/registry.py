"""What plugins register: small, cheap declarations.

A declaration carries names and a ``"module:attr"`` factory string; `load_factory`
imports the module only when the thing is actually used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import attrs

from ..errors import PluginError

AUDIO_KINDS = ("vad", "kws", "transcriber", "diarizer")


def _tuple_of_str(value) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    return tuple(str(v) for v in value)


def _check_factory(instance, attribute, value):
    if not isinstance(value, str) or value.count(":") != 1 or not all(value.split(":")):
        raise PluginError(f"{type(instance).__name__} {instance.name!r}: factory must be 'module:attr', got {value!r}")


def load_factory(spec: str) -> Any:
    """Import ``"module:attr"`` and return the attribute."""
    module, _, attr = spec.partition(":")
    try:
        obj = importlib.import_module(module)
    except Exception as e:  # the plugin's own import failure: report it as the plugin's
        raise PluginError(f"cannot import {module!r} (from factory {spec!r}): {type(e).__name__}: {e}") from e
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise PluginError(f"factory {spec!r}: module {module!r} has no attribute {attr!r}") from None
    return obj


@attrs.frozen
class BackendSpec:
    """A compute backend.

    ``tensor_types`` are GGML type names the backend has kernels for, ``ops`` the op
    vocabulary it implements (see `cera.backend.OPS`). ``available`` is an optional cheap
    check, defined in the plugin module itself, returning None when the backend can run
    here or a sentence saying why not. Higher ``priority`` wins for ``device="auto"``.
    """

    name: str
    factory: str = attrs.field(validator=_check_factory)
    tensor_types: tuple[str, ...] = attrs.field(converter=_tuple_of_str, default=())
    ops: tuple[str, ...] = attrs.field(converter=_tuple_of_str, default=())
    priority: int = 0
    description: str = ""
    available: Callable[[], str | None] | None = None
    # A registered name with no implementation yet (`cera.plugins.placeholder`): listed by `cera
    # plugins`, never announced as "passed over" when another backend runs a model.
    placeholder: bool = False
    # An optional cheap description of the device and how each tensor type runs, as plain
    # JSON data (`cera plugins --json` shows it); the plugin's code, like ``available``.
    details: Callable[[], dict] | None = None

    def unavailable_reason(self) -> str | None:
        """None if the backend's availability check passes, else why not. The check is the
        plugin's code: it runs with a time limit (`PROBE_TIMEOUT_S`), and whatever it raises
        or a hang is the reason, so a broken check cannot take `cera plugins` or loading down.
        The answer is kept: a check that hangs costs its time once."""
        if self.available is None:
            return None
        cached = _probe_results.get(id(self))
        if cached is not None and cached[0] is self:
            return cached[1]
        from . import timelimit

        try:
            reason = timelimit.call(self.available, seconds=PROBE_TIMEOUT_S, name=f"cera-probe:{self.name}")
        except timelimit.TimedOut:
            reason = f"availability check did not finish within {PROBE_TIMEOUT_S:g} s"
        except timelimit.Failed as e:
            reason = f"availability check failed: {e}"
        if reason is not None and not isinstance(reason, str):
            reason = f"availability check returned {type(reason).__name__}, not None or a reason"
        _probe_results[id(self)] = (self, reason)
        return reason


PROBE_TIMEOUT_S = 5.0
_probe_results: dict[int, tuple[BackendSpec, str | None]] = {}


@attrs.frozen
class ModelFamily:
    """A model family: the GGUF architecture strings it serves and its model class."""

    name: str
    architectures: tuple[str, ...] = attrs.field(converter=_tuple_of_str)
    factory: str = attrs.field(validator=_check_factory)
    description: str = ""


@attrs.frozen
class AudioComponent:
    """An audio component of one ``kind`` (vad, kws, transcriber, diarizer)."""

    name: str
    kind: str = attrs.field(validator=attrs.validators.in_(AUDIO_KINDS))
    factory: str = attrs.field(validator=_check_factory)
    architectures: tuple[str, ...] = attrs.field(converter=_tuple_of_str, default=())
    description: str = ""
