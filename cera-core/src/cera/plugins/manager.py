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

**Who owns a name.** A name (backend, architecture, family, audio component, command)
registered by two plugins is a conflict, resolved the same way whatever order the
installer or the file system lists plugins in: the distributions of this repository
(`FIRST_PARTY`) load first and own every name they register, and own the backend and
architecture names of `cera.plugins.distributions` even when they are not installed; the other
plugins load after them, sorted by name, and the first to register a free name keeps it.
A plugin that claims a taken or first-party name is refused, with the reason, and
registers nothing. Someone who really wants to replace a backend (or any other name)
says so: ``CERA_PLUGIN_OVERRIDES=backend:cpu=myplugin`` (comma-separated
``kind:name=plugin``, plugin by entry-point or distribution name) gives the name to that
plugin; the plugin that held it keeps its other names, and both records say what happened.

**Time limits.** Plugin modules are imported in parallel threads, and the registration
hooks and backends' availability checks run in threads too, each with a time limit
(``CERA_PLUGIN_TIMEOUT`` seconds for imports and hooks, default 10; 5 s for an
availability check). A plugin that overruns is reported and skipped; anything it raises,
`SystemExit` and `KeyboardInterrupt` included, is caught and reported.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from importlib import metadata
from typing import Any

import attrs
import pluggy
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from . import distributions, hookspecs, timelimit
from ..errors import PluginError
from .registry import AudioComponent, BackendSpec, ModelFamily

ENTRY_POINT_GROUP = "cera"
PLUGIN_API_VERSION = 2
PLUGINS_ENV = "CERA_PLUGINS"
OVERRIDES_ENV = "CERA_PLUGIN_OVERRIDES"
TIMEOUT_ENV = "CERA_PLUGIN_TIMEOUT"
DEFAULT_TIMEOUT_S = 10.0

# The distributions of this repository: they load first and own the names they register
# (tests/core/test_plugin_ownership.py checks this list against the repository's folders).
FIRST_PARTY = frozenset(
    {
        *distributions.BACKENDS.values(),
        *distributions.FAMILIES.values(),
        *(dist for dist, _, _ in distributions.AUDIO.values()),
        "cera-audio-vad",
        "cera-audio-whisper",
        "cera-audio-listen",
        "cera-model-bert",
        "cera-model-mamba",
        "cera-serve",
        "cera-cli",
        "cera-core",
    }
)

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
    notes: list[str] = attrs.Factory(list)  # names it gave up to, or took from, an override

    @property
    def first_party(self) -> bool:
        return self.distribution in FIRST_PARTY

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
            # only when there is something to say: names given up to or taken by an override
            **({"notes": list(self.notes)} if self.notes else {}),
        }


def overrides_from_env() -> dict[tuple[str, str], str]:
    """``CERA_PLUGIN_OVERRIDES``: ``kind:name=plugin`` entries, comma-separated."""
    raw = os.environ.get(OVERRIDES_ENV, "")
    out: dict[tuple[str, str], str] = {}
    for entry in raw.split(","):
        entry = entry.strip()
        if not entry:
            continue
        claim, sep, plugin = entry.partition("=")
        kind, sep2, name = claim.partition(":")
        if not (sep and sep2 and kind.strip() and name.strip() and plugin.strip()):
            raise PluginError(
                f"{OVERRIDES_ENV}: {entry!r} is not kind:name=plugin (for example backend:cpu=myplugin)"
            )
        out[(kind.strip(), name.strip())] = plugin.strip()
    return out


def timeout_from_env() -> float:
    raw = os.environ.get(TIMEOUT_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        raise PluginError(f"{TIMEOUT_ENV} must be a number of seconds, got {raw!r}") from None
    if not value > 0:
        raise PluginError(f"{TIMEOUT_ENV} must be positive, got {raw!r}")
    return value


def _static_owner(claim: tuple[str, str]) -> str | None:
    """The first-party distribution that owns a name whether or not it is installed."""
    kind, name = claim
    if kind == "backend":
        return distributions.BACKENDS.get(name)
    if kind == "architecture":
        return distributions.FAMILIES.get(name) or (distributions.AUDIO.get(name) or (None,))[0]
    return None


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

    def __init__(self, allow: set[str] | None = None, reserved: dict[tuple[str, str], str] | None = None,
                 overrides: dict[tuple[str, str], str] | None = None, timeout: float | None = None):  # fmt: skip
        self.allow = allow
        # (kind, name) -> the plugin (entry-point or distribution name) that may take it
        self.overrides = dict(overrides_from_env() if overrides is None else overrides)
        self.timeout = timeout_from_env() if timeout is None else timeout
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

    def load_entry_points(self, timeout: float | None = None, third_party_timeout: float | None = None) -> None:
        """Import every (allowed) plugin, all at once in threads, waiting at most ``timeout``
        seconds (default: the manager's) for all of them; then register them in the order
        that decides who owns a contested name (see the module docstring).

        ``third_party_timeout`` (at most ``timeout``) bounds the wait for plugins that are not
        distributions of cera itself: `cera --help` waits for its own plugins, which import in
        about a millisecond, but not long for a third party's, which may import anything."""
        timeout = self.timeout if timeout is None else timeout
        third_party_timeout = timeout if third_party_timeout is None else min(timeout, third_party_timeout)
        seen = set()
        found = []
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
            found.append((ep, PluginRecord(name=ep.name, distribution=dist_name, version=version)))
        found.sort(key=lambda f: (not f[1].first_party, f[0].name, f[1].distribution or "", f[0].value))
        started = [(ep, rec, timelimit.start(ep.load, name=f"cera-plugin-import:{ep.name}")) for ep, rec in found]
        start = time.monotonic()
        for ep, record, (done, box) in started:
            limit = timeout if record.first_party else third_party_timeout
            if not done.wait(max(0.0, start + limit - time.monotonic())):
                self._fail(
                    record,
                    f"import of {ep.value!r} did not finish within {limit:g} s ({TIMEOUT_ENV}); skipped",
                )
            elif "error" in box:
                e = box["error"]
                self._fail(record, f"import of {ep.value!r} failed: {type(e).__name__}: {e}")
            else:
                # its registration hooks get the same bound as its import
                self._add(box["value"], record, hook_timeout=limit)

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

    def _add(self, module: Any, record: PluginRecord, hook_timeout: float | None = None) -> None:
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
        limit = self.timeout if hook_timeout is None else hook_timeout
        try:
            staged = timelimit.call(self._collect, module, seconds=limit, name=f"cera-plugin-hooks:{record.name}")
            self._commit(staged, record)
        except (timelimit.TimedOut, timelimit.Failed, PluginError) as e:
            self.pm.unregister(module)
            if isinstance(e, timelimit.TimedOut):
                reason = f"its registration hooks did not finish within {limit:g} s ({TIMEOUT_ENV})"
            elif isinstance(e, PluginError) or isinstance(getattr(e, "error", None), PluginError):
                reason = str(getattr(e, "error", e))
            else:
                reason = f"{type(e.error).__name__} in a registration hook: {e.error}"
            self._fail(record, reason)
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
        items: list[tuple[str, Any, list[tuple[str, str]]]] = []
        for hook, item in staged:
            if hook == "cera_register_backends":
                if not isinstance(item, BackendSpec):
                    raise PluginError(f"cera_register_backends registered {item!r}, expected cera.BackendSpec")
                claims = [("backend", item.name)]
            elif hook == "cera_register_models":
                if not isinstance(item, ModelFamily):
                    raise PluginError(f"cera_register_models registered {item!r}, expected cera.ModelFamily")
                claims = [("family", item.name)] + [("architecture", a) for a in item.architectures]
            elif hook == "cera_register_audio":
                if not isinstance(item, AudioComponent):
                    raise PluginError(f"cera_register_audio registered {item!r}, expected cera.AudioComponent")
                claims = [("audio", item.name)]
            else:
                name = getattr(item, "name", None)
                if not name or not callable(getattr(item, "main", None)):
                    raise PluginError(f"cera_register_commands registered {item!r}, expected a click command")
                claims = [("command", name)]
            items.append((hook, item, claims))
        seen = set()
        takes: list[tuple[str, str]] = []  # names this plugin takes over through an override
        gives: set[tuple[str, str]] = set()  # names it leaves to an override's plugin that holds them
        for claim in (c for _, _, claims in items for c in claims):
            kind, name = claim
            if claim in seen:
                raise PluginError(f"registers {kind} {name!r} twice")
            seen.add(claim)
            if claim in self.reserved:
                raise PluginError(f"registers {kind} {name!r}, which is reserved by {self.reserved[claim]}")
            designee = self.overrides.get(claim)
            holder = self.owner.get(claim)
            if designee is not None and self._is(record, designee):
                if holder is not None:
                    takes.append(claim)
                continue
            if designee is not None and holder is not None and self._is(self._record(holder), designee):
                gives.add(claim)
                continue
            if holder is not None:
                held = self._record(holder)
                whose = f" ({held.distribution}, a distribution of cera itself)" if held and held.first_party else ""
                raise PluginError(
                    f"registers {kind} {name!r}, which plugin {holder!r}{whose} already registered"
                    + (self._override_hint(claim) if held and held.first_party else "")
                )
            owner = _static_owner(claim)
            if owner is not None and record.distribution != owner and not record.first_party:
                raise PluginError(
                    f"registers {kind} {name!r}, which belongs to {owner}, a distribution of cera itself"
                    + self._override_hint(claim)
                )
        for claim in takes:
            self._release(claim, record)
        for claim in gives:
            record.notes.append(
                f"{claim[0]} {claim[1]!r} is left to plugin {self.owner[claim]!r} ({OVERRIDES_ENV})"
            )
        for hook, item, claims in items:
            if any(c in gives for c in claims[:1]):
                continue  # the item's own name went to the override's plugin
            if hook == "cera_register_backends":
                self.backends[item.name] = item
                record.backends.append(item.name)
            elif hook == "cera_register_models":
                self.families[item.name] = item
                for arch in item.architectures:
                    if ("architecture", arch) in gives:
                        continue
                    self.architectures[arch] = item
                    record.architectures.append(arch)
            elif hook == "cera_register_audio":
                self.audio[item.name] = item
                record.audio.append(item.name)
            else:
                self.commands[item.name] = item
                record.commands.append(item.name)
            for claim in claims:
                if claim not in gives:
                    self.owner[claim] = record.name

    def _is(self, record: PluginRecord | None, who: str) -> bool:
        return record is not None and who in (record.name, record.distribution)

    def _record(self, name: str) -> PluginRecord | None:
        return next((r for r in self.records if r.name == name and r.status == "ok"), None)

    def _override_hint(self, claim: tuple[str, str]) -> str:
        return f"; to replace it on purpose, set {OVERRIDES_ENV}={claim[0]}:{claim[1]}=<plugin name>"

    def _release(self, claim: tuple[str, str], taker: PluginRecord) -> None:
        """An override gives ``claim`` to ``taker``: the holder keeps its other names."""
        kind, name = claim
        holder = self._record(self.owner[claim])
        del self.owner[claim]
        lists = {"backend": "backends", "architecture": "architectures", "audio": "audio", "command": "commands"}
        tables = {"backend": self.backends, "architecture": self.architectures, "audio": self.audio,
                  "command": self.commands, "family": self.families}  # fmt: skip
        tables[kind].pop(name, None)
        if holder is not None:
            if kind in lists and name in getattr(holder, lists[kind]):
                getattr(holder, lists[kind]).remove(name)
            holder.notes.append(f"{kind} {name!r} was replaced by plugin {taker.name!r} ({OVERRIDES_ENV})")
        taker.notes.append(f"takes {kind} {name!r} from plugin {holder.name if holder else '?'!r} ({OVERRIDES_ENV})")

    # -- queries --------------------------------------------------------------------

    def family_for(self, architecture: str) -> ModelFamily:
        from ..errors import UnsupportedArchitecture

        fam = self.architectures.get(architecture)
        if fam is None:
            raise UnsupportedArchitecture(
                architecture, {a: f.name for a, f in self.architectures.items()}, plugins_disabled=self.allow == set()
            )
        return fam

    def backend_spec(self, name: str) -> BackendSpec:
        from .distributions import backend_hint
        from ..errors import BackendUnavailable

        spec = self.backends.get(name)
        if spec is None:
            have = ", ".join(sorted(self.backends)) or "none"
            # never an install command built from the name typed: see cera.plugins.distributions
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


def get_manager(timeout: float | None = None, third_party_timeout: float | None = None) -> PluginManager:
    """The process-wide plugin manager, loading entry points on first use (waiting at most
    ``timeout`` seconds for plugin imports, default ``CERA_PLUGIN_TIMEOUT``, and at most
    ``third_party_timeout`` for those of other distributions than cera's own)."""
    global _manager, _loading
    if timelimit.in_limited_call():
        # A plugin asked for the manager while being imported (or from a hook or probe).
        # Waiting for the lock would wait for itself; loading again would recurse.
        raise PluginError(
            "cera.plugins.manager.get_manager() was called while plugins are loading, from a plugin's "
            "import or registration hook; plugins must not look up other plugins at import time"
        )
    with _lock:
        if _manager is None:
            if _loading:
                raise PluginError(
                    "cera.plugins.manager.get_manager() was called while plugins are loading, from a plugin's "
                    "import or registration hook; plugins must not look up other plugins at import time"
                )
            _loading = True
            try:
                m = PluginManager(allow=allowlist_from_env())
                m.load_entry_points(timeout, third_party_timeout)
            finally:
                _loading = False
            _manager = m
        return _manager


def set_manager(manager: PluginManager | None) -> None:
    """Replace the process-wide manager (None: rediscover on next use). For tests and the CLI."""
    global _manager
    with _lock:
        _manager = manager
