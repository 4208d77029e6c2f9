"""Plugin discovery and registration, on pluggy.

Plugins are modules named by entry points in the group `ENTRY_POINT_GROUP`. Each loads in
isolation: a plugin that fails to import, targets another plugin-API version, raises in a
hook, or registers a name another plugin already holds is recorded with the reason and
skipped, and every other plugin keeps working. Nothing a plugin registers is imported
beyond its plugin module until a factory runs.

`CERA_PLUGINS` is an allowlist of plugin (entry-point) or distribution names, separated by
commas: unset loads every plugin, empty loads none.

Names an application already holds (the CLI's built-in commands) can be reserved with
`reserve`, so that a plugin claiming one is reported instead of being silently shadowed.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from importlib import metadata
from typing import Any

import attrs
import pluggy
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from . import hookspecs
from .errors import PluginError
from .registry import AudioComponent, BackendSpec, ModelFamily

ENTRY_POINT_GROUP = "cera"
PLUGIN_API_VERSION = 2
PLUGINS_ENV = "CERA_PLUGINS"

_HOOKS = ("cera_register_backends", "cera_register_models", "cera_register_audio", "cera_register_commands")

# (kind, name) -> holder, claimed before any plugin loads; see `reserve`.
_reserved: dict[tuple[str, str], str] = {}


def reserve(kind: str, names: Iterable[str], holder: str) -> None:
    """Claim names for the application itself (e.g. kind "command" for built-in CLI commands).

    Managers created afterwards refuse a plugin that registers one of them, naming `holder`.
    """
    for name in names:
        _reserved[(kind, name)] = holder


@attrs.define
class PluginRecord:
    """What `cera plugins` reports about one plugin."""

    name: str
    distribution: str | None = None
    version: str | None = None
    status: str = "ok"  # "ok" or "error"
    error: str | None = None
    backends: list[str] = attrs.Factory(list)
    architectures: list[str] = attrs.Factory(list)
    audio: list[str] = attrs.Factory(list)
    commands: list[str] = attrs.Factory(list)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "status": self.status,
            "error": self.error,
            "registered": {
                "backends": list(self.backends),
                "architectures": list(self.architectures),
                "audio": list(self.audio),
                "commands": list(self.commands),
            },
        }


def allowlist_from_env() -> set[str] | None:
    raw = os.environ.get(PLUGINS_ENV)
    if raw is None:
        return None
    return {p.strip() for p in raw.split(",") if p.strip()}


def _check_api(module: Any) -> str | None:
    """None if the module supports this core's plugin API, else the reason it does not."""
    declared = getattr(module, "CERA_PLUGIN_API", None)
    if declared is None:
        return "does not declare CERA_PLUGIN_API (the plugin-API versions it supports, e.g. '>=2,<3')"
    try:
        spec = SpecifierSet(str(declared))
    except InvalidSpecifier:
        return f"CERA_PLUGIN_API {declared!r} is not a version specifier such as '>=2,<3'"
    if Version(str(PLUGIN_API_VERSION)) not in spec:
        return (
            f"targets plugin API {declared!r} but this cera-core provides API {PLUGIN_API_VERSION}; "
            f"upgrade the plugin or cera-core"
        )
    return None


class PluginManager:
    """Holds every loaded plugin and what it registered."""

    def __init__(self, allow: set[str] | None = None, reserved: dict[tuple[str, str], str] | None = None):
        self.allow = allow
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.records: list[PluginRecord] = []
        self.backends: dict[str, BackendSpec] = {}
        self.families: dict[str, ModelFamily] = {}
        self.architectures: dict[str, ModelFamily] = {}
        self.audio: dict[str, AudioComponent] = {}
        self.commands: dict[str, Any] = {}
        self.owner: dict[tuple[str, str], str] = {}  # (kind, name) -> plugin name
        # Names held by the application, not by a plugin (see `reserve`).
        self.reserved: dict[tuple[str, str], str] = dict(_reserved if reserved is None else reserved)
        # Installed plugins that the allowlist left out: (entry-point name, distribution).
        self.skipped: list[tuple[str, str | None]] = []

    # -- loading --------------------------------------------------------------------

    def load_entry_points(self) -> None:
        seen = set()
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = getattr(ep, "dist", None)
            dist_name = dist.metadata["Name"] if dist is not None else None
            version = dist.version if dist is not None else None
            # The same distribution found twice on sys.path is one plugin; two distributions
            # that both name a plugin X are a conflict, which `_add` reports.
            if (ep.name, dist_name, ep.value) in seen:
                continue
            seen.add((ep.name, dist_name, ep.value))
            if self.allow is not None and ep.name not in self.allow and dist_name not in self.allow:
                self.skipped.append((ep.name, dist_name))
                continue
            record = PluginRecord(name=ep.name, distribution=dist_name, version=version)
            try:
                module = ep.load()
            except (Exception, SystemExit) as e:  # SystemExit: a plugin must not end the program
                self._fail(record, f"import of {ep.value!r} failed: {type(e).__name__}: {e}")
                continue
            self._add(module, record)

    def unknown_allowlist_names(self) -> list[str]:
        """Names in the allowlist that match no installed plugin or distribution (typos)."""
        if not self.allow:
            return []
        known = {r.name for r in self.records} | {r.distribution for r in self.records}
        known |= {n for n, _ in self.skipped} | {d for _, d in self.skipped}
        return sorted(n for n in self.allow if n not in known)

    def register_plugin(self, module: Any, name: str, distribution: str | None = None, version: str | None = None) -> PluginRecord:
        """Register an in-process plugin object (tests, notebooks, embedding applications)."""
        record = PluginRecord(name=name, distribution=distribution, version=version)
        self._add(module, record)
        return record

    def _fail(self, record: PluginRecord, reason: str) -> None:
        record.status = "error"
        record.error = reason
        self.records.append(record)

    def _add(self, module: Any, record: PluginRecord) -> None:
        if any(r.name == record.name for r in self.records):
            self._fail(record, f"a plugin named {record.name!r} is already loaded")
            return
        reason = _check_api(module)
        if reason:
            self._fail(record, reason)
            return
        if self.pm.is_registered(module):
            self._fail(record, f"its module is already loaded as plugin {self.pm.get_name(module)!r}")
            return
        try:
            self.pm.register(module, name=record.name)
        except Exception as e:  # pluggy validation: wrong hook signature, unknown hook option, ...
            self._fail(record, f"invalid hook implementation: {e}")
            return
        try:
            staged = self._collect(module)
            self._commit(staged, record)
        except (Exception, SystemExit) as e:
            self.pm.unregister(module)
            self._fail(record, str(e) if isinstance(e, PluginError) else f"{type(e).__name__} in a registration hook: {e}")
            return
        self.records.append(record)

    def _collect(self, module: Any) -> list[tuple[str, Any]]:
        """Run the plugin's own hook implementations, collecting what they register."""
        unknown = [n for n in dir(module) if n.startswith("cera_register_") and n not in _HOOKS]
        if unknown:
            raise PluginError(f"implements unknown hook(s) {unknown}; known hooks: {list(_HOOKS)}")
        staged: list[tuple[str, Any]] = []
        open_hook: list[str] = []  # the hook now running; empty once it has returned
        for hook_name in _HOOKS:
            caller = getattr(self.pm.hook, hook_name)
            for impl in caller.get_hookimpls():
                if impl.plugin is not module:
                    continue
                if impl.hookwrapper or impl.wrapper:
                    raise PluginError(f"{hook_name} is declared as a hook wrapper; registration hooks are plain functions")

                def register(item, _hook=hook_name):
                    if open_hook != [_hook]:
                        raise PluginError(f"register() of {_hook} was called after the hook returned")
                    staged.append((_hook, item))

                # pluggy lets an implementation take a subset of the spec's arguments.
                args = {"register": register}
                open_hook[:] = [hook_name]
                try:
                    impl.function(**{a: args[a] for a in impl.argnames})
                finally:
                    open_hook.clear()
        return staged

    def _commit(self, staged: list[tuple[str, Any]], record: PluginRecord) -> None:
        # Validate everything first, so a conflicting plugin registers nothing at all.
        claims: list[tuple[str, str]] = []
        for hook, item in staged:
            if hook == "cera_register_backends":
                if not isinstance(item, BackendSpec):
                    raise PluginError(f"cera_register_backends registered {item!r}, expected cera.BackendSpec")
                claims.append(("backend", item.name))
            elif hook == "cera_register_models":
                if not isinstance(item, ModelFamily):
                    raise PluginError(f"cera_register_models registered {item!r}, expected cera.ModelFamily")
                claims.append(("family", item.name))
                claims.extend(("architecture", a) for a in item.architectures)
            elif hook == "cera_register_audio":
                if not isinstance(item, AudioComponent):
                    raise PluginError(f"cera_register_audio registered {item!r}, expected cera.AudioComponent")
                claims.append(("audio", item.name))
            else:
                name = getattr(item, "name", None)
                if not name or not callable(getattr(item, "main", None)):
                    raise PluginError(f"cera_register_commands registered {item!r}, expected a click command")
                claims.append(("command", name))
        seen = set()
        for claim in claims:
            if claim in self.reserved:
                raise PluginError(f"registers {claim[0]} {claim[1]!r}, which is reserved by {self.reserved[claim]}")
            holder = self.owner.get(claim)
            if holder is not None:
                raise PluginError(f"registers {claim[0]} {claim[1]!r}, which plugin {holder!r} already registered")
            if claim in seen:
                raise PluginError(f"registers {claim[0]} {claim[1]!r} twice")
            seen.add(claim)
        for claim in claims:
            self.owner[claim] = record.name
        for hook, item in staged:
            if hook == "cera_register_backends":
                self.backends[item.name] = item
                record.backends.append(item.name)
            elif hook == "cera_register_models":
                self.families[item.name] = item
                for arch in item.architectures:
                    self.architectures[arch] = item
                    record.architectures.append(arch)
            elif hook == "cera_register_audio":
                self.audio[item.name] = item
                record.audio.append(item.name)
            else:
                self.commands[item.name] = item
                record.commands.append(item.name)

    # -- queries --------------------------------------------------------------------

    def family_for(self, architecture: str) -> ModelFamily:
        from .errors import UnsupportedArchitecture

        fam = self.architectures.get(architecture)
        if fam is None:
            raise UnsupportedArchitecture(
                architecture, {a: f.name for a, f in self.architectures.items()}, plugins_disabled=self.allow == set()
            )
        return fam

    def backend_spec(self, name: str) -> BackendSpec:
        from .distributions import backend_hint
        from .errors import BackendUnavailable

        spec = self.backends.get(name)
        if spec is None:
            have = ", ".join(sorted(self.backends)) or "none"
            # never an install command built from the name typed: see cera.distributions
            raise BackendUnavailable(
                f"no backend named {name!r} is installed (installed: {have}); "
                f"{backend_hint(name, plugins_disabled=self.allow == set())}"
            )
        return spec

    def audio_components(self, kind: str | None = None) -> list[AudioComponent]:
        return [a for a in self.audio.values() if kind is None or a.kind == kind]

    def plugin_of(self, kind: str, name: str) -> str | None:
        return self.owner.get((kind, name))

    def errors(self) -> Iterable[PluginRecord]:
        return [r for r in self.records if r.status != "ok"]


_manager: PluginManager | None = None
_lock = threading.RLock()
_loading = False


def get_manager() -> PluginManager:
    """The process-wide plugin manager, loading entry points on first use."""
    global _manager, _loading
    with _lock:
        if _manager is None:
            if _loading:
                # A plugin asked for the manager while being imported. With a plain lock this
                # would deadlock; with a re-entrant one it would load every plugin again.
                raise PluginError(
                    "cera.plugins.get_manager() was called while plugins are loading, from a plugin's "
                    "import or registration hook; plugins must not look up other plugins at import time"
                )
            _loading = True
            try:
                m = PluginManager(allow=allowlist_from_env())
                m.load_entry_points()
            finally:
                _loading = False
            _manager = m
        return _manager


def set_manager(manager: PluginManager | None) -> None:
    """Replace the process-wide manager (None: rediscover on next use). For tests and the CLI."""
    global _manager
    with _lock:
        _manager = manager
