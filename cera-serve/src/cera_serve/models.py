"""The models a server serves, by id: loaded on first use, unloaded least recently used first
when the loaded ones would exceed a memory budget.

A model's id is what the user named it: its ``-m`` source as given (a bundle name, a path,
a hub repo) or its ``--alias``. A request names the model it wants in its ``model`` field
(a request without one gets the first model); any other name is a 404 in OpenAI's error
shape. Each loaded model has its own scheduler (``--parallel`` slots) and its own bounded
queue, so one model's load does not hold another's requests.

Memory: a loaded model counts its weights (the GGUF's tensor bytes), its scheduler's state
(the KV cache of every slot) and its prefix cache's budget. Before a load, the models that
are idle (no sequence running or waiting) go, least recently used first, until the new one
fits; a model that is busy is never unloaded under its requests. A model that cannot fit
beside the busy ones is a 503 that says which models hold the memory.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

PREFIX_CACHE_BYTES = 512 * 2**20  # the memory prefix cache of each loaded model (LoadedModel's default)


def default_budget() -> int:
    """Half of the machine's physical memory: room for the models and for everything else."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30


def model_ids(sources: list[str], aliases: list[str]) -> list[str]:
    """The id of each source: its alias by position, else the source as given."""
    from cera.errors import InvalidOptions

    if len(aliases) > len(sources):
        raise InvalidOptions(f"{len(aliases)} aliases for {len(sources)} models: give one --alias per -m, in order")
    ids = [aliases[i] if i < len(aliases) else s for i, s in enumerate(sources)]
    for i in ids:
        if not i or not i.strip():
            raise InvalidOptions("a model id (--alias) must not be empty")
    seen = {i for i in ids if ids.count(i) > 1}
    if seen:
        raise InvalidOptions(f"model id {sorted(seen)[0]!r} is given twice: each -m needs a distinct name or --alias")
    return ids


class ServedModel:
    """One model by id: its source and, while loaded, its model, scheduler and slots."""

    def __init__(self, id: str, source: str, config, metrics, loaded=None, chat_template: str | None = None,
                 first: bool = False):  # fmt: skip
        self.id = id
        self.first = first  # the first model: the one --model-draft and --lora apply to
        self.source = source
        self.chat_template = chat_template  # --chat-template: a Jinja file or a name, instead of the file's own
        self.config = config
        self.metrics = metrics
        self.given = loaded  # a model the caller loaded: used as is, never closed by the server
        self.status = "unloaded"  # unloaded, loading, ready, unloading or failed
        self.error: str | None = None
        self.loaded = None
        self.scheduler = None
        self.adapters = None  # `cera_serve.adapters.ServedAdapters` (none but the first model's)
        self.slots: asyncio.Semaphore | None = None
        self.waiting = 0
        self.busy = 0  # sequences running or waiting for a slot
        self.nbytes = 0
        self.last_used = 0.0
        self.created = int(time.time())
        self.lock = asyncio.Lock()  # one load (or unload) of this model at a time

    # -- loading (in a worker thread) ----------------------------------------------------------

    def load(self) -> None:
        import cera

        from .adapters import ServedAdapters
        from .speculation import attach_draft

        try:
            loaded = self.given
            if loaded is None:
                loaded = cera.load(self.source, device=self.config.device, threads=self.config.threads, quiet=True,
                                   mmproj=self.config.mmproj if self.first else None)  # fmt: skip
            elif self.first and self.config.mmproj is not None and loaded.projector is None:
                loaded.load_projector(self.config.mmproj)
            if self.chat_template is not None:
                from cera.text.chat_template import chosen_template

                loaded.chat_template = chosen_template(loaded.gguf, self.chat_template)
            if self.first and self.config.model_draft is not None and loaded.draft is None:
                attach_draft(loaded, self.config)
            self.adapters = ServedAdapters(loaded, self.config.loras if self.first else ())
            if loaded.prefix_cache is None:
                loaded.enable_prefix_cache(directory=self.config.prompt_cache)
            self.scheduler = loaded.scheduler(n_slots=self.config.parallel, n_ctx=self.config.n_ctx)
            self.loaded = loaded
            self.nbytes = weights_bytes(loaded) + self.scheduler.state.nbytes() + PREFIX_CACHE_BYTES
            self.status = "ready"
            self.error = None
        except Exception as e:  # noqa: BLE001 - reported by /health, /v1/models and on every request
            self.error = f"{type(e).__name__}: {e}"
            self.status = "failed"

    def unload(self) -> None:
        loaded, self.loaded, self.scheduler, self.adapters = self.loaded, None, None, None
        self.status, self.nbytes = "unloaded", 0
        if loaded is not None and self.given is None:
            if loaded.draft is not None:
                loaded.draft.close()
            loaded.close()

    # -- admission ---------------------------------------------------------------------------

    async def slot(self) -> None:
        """Wait for a free sequence slot of this model (bounded queue: 429 past it)."""
        from .app import APIError

        if self.slots.locked() and self.waiting >= self.config.max_queue:
            self.metrics.rejected += 1
            raise APIError(429, f"model {self.id!r} is busy: {self.config.parallel} sequences run and {self.waiting} "
                                "wait; retry later", "rate_limit_error", code="busy", headers={"Retry-After": "1"})  # fmt: skip
        self.waiting += 1
        self.busy += 1
        try:
            await self.slots.acquire()
        except BaseException:
            self.busy -= 1
            raise
        finally:
            self.waiting -= 1
        self.last_used = time.monotonic()

    def release(self) -> None:
        """A slot is free again (called on the event loop)."""
        self.busy -= 1
        self.last_used = time.monotonic()
        self.slots.release()

    @property
    def takes_images(self) -> bool:
        """Whether chat messages to this model may hold images (it has, or will load, a projector)."""
        if self.loaded is not None:
            return getattr(self.loaded, "projector", None) is not None
        return self.first and self.config.mmproj is not None

    def describe(self) -> dict:
        body = {"id": self.id, "object": "model", "created": self.created, "owned_by": "cera", "status": self.status,
                "input_modalities": ["text", "image"] if self.takes_images else ["text"]}  # fmt: skip
        if self.error:
            body["error"] = self.error
        return body


def weights_bytes(loaded) -> int:
    try:
        return sum(t.nbytes for t in loaded.gguf.tensors.values())
    except AttributeError:
        return Path(loaded.path).stat().st_size


def predicted_bytes(source: str) -> int:
    """What a model is expected to take before it is loaded: its file's size where the source
    is a file (a bundle or hub model is measured once loaded)."""
    try:
        p = Path(source).expanduser()
        return p.stat().st_size if p.is_file() else 0
    except (OSError, ValueError):
        return 0


class Models:
    """The served models by id, in the order given (the first is the default)."""

    def __init__(self, config, metrics):
        sources = list(config.models) or [config.model or _default_source()]
        if config.loaded is not None and not config.models and config.model is None and not config.aliases:
            ids = [Path(str(getattr(config.loaded, "path", "model"))).stem]
        else:
            ids = model_ids(sources, list(config.aliases))
        self.budget = config.memory_budget if config.memory_budget is not None else default_budget()
        self.by_id: dict[str, ServedModel] = {}
        templates = list(getattr(config, "chat_templates", ()))
        if len(templates) > len(sources):
            from cera.errors import InvalidOptions

            raise InvalidOptions(f"{len(templates)} chat templates for {len(sources)} models: give one --chat-template "
                                 "per -m, in order")  # fmt: skip
        for i, (mid, src) in enumerate(zip(ids, sources, strict=True)):
            self.by_id[mid] = ServedModel(mid, src, config, metrics, loaded=config.loaded if i == 0 else None,
                                          chat_template=templates[i] if i < len(templates) else None,
                                          first=i == 0)  # fmt: skip
        self.default = self.by_id[ids[0]]
        # a request's "model" may name one of the first model's LoRA adapters (cera_serve.adapters)
        self.adapter_names = {spec.name for spec in getattr(config, "loras", ())}
        clash = self.adapter_names & set(self.by_id)
        if clash:
            from cera.errors import InvalidOptions

            raise InvalidOptions(f"the LoRA adapter name {sorted(clash)[0]!r} is also a model id: name the adapter "
                                 "NAME=FILE or the model --alias")  # fmt: skip

    def __iter__(self):
        return iter(self.by_id.values())

    @property
    def waiting(self) -> int:
        return sum(m.waiting for m in self)

    def find(self, name) -> ServedModel:
        from .app import APIError

        if name is None:
            return self.default
        if not isinstance(name, str):
            raise APIError(400, "'model' must be a string", param="model")
        m = self.by_id.get(name)
        if m is None and name in self.adapter_names:
            return self.default
        if m is None:
            known = ", ".join(repr(i) for i in self.by_id)
            raise APIError(404, f"the model {name!r} does not exist; this server serves {known} (GET /v1/models)",
                           param="model", code="model_not_found")  # fmt: skip
        return m

    async def get(self, name) -> ServedModel:
        """The named model, loaded (loading it now, and unloading idle ones to make room)."""
        from .app import APIError

        m = self.find(name)
        if m.status != "ready":
            async with m.lock:
                if m.status == "unloaded":
                    await self._make_room(m, predicted_bytes(m.source))
                    m.status = "loading"
                    await asyncio.get_running_loop().run_in_executor(None, m.load)
                    if m.slots is None:
                        m.slots = asyncio.Semaphore(m.config.parallel)
                    if m.status == "ready":
                        await self._make_room(m, 0)
        if m.status == "failed":
            raise APIError(503, f"the model {m.id!r} failed to load: {m.error}", "server_error", code="load_failed")
        if m.status != "ready":  # unloaded again while this request waited for another's load
            return await self.get(name)
        m.last_used = time.monotonic()
        return m

    async def _make_room(self, coming: ServedModel, extra: int) -> None:
        """Unload idle models, least recently used first, until the loaded ones and ``extra``
        bytes fit the budget."""
        from .app import APIError

        def used() -> int:
            return sum(m.nbytes for m in self if m.status == "ready")

        idle = sorted((m for m in self if m is not coming and m.status == "ready" and m.busy == 0),
                      key=lambda m: m.last_used)  # fmt: skip
        while used() + extra > self.budget and idle:
            victim = idle.pop(0)
            async with victim.lock:
                if victim.busy == 0 and victim.status == "ready":
                    victim.status = "unloading"  # a request arriving now waits for the lock, then loads it again
                    await asyncio.get_running_loop().run_in_executor(None, victim.unload)
        if extra and used() + extra > self.budget:
            held = ", ".join(f"{m.id!r} ({m.nbytes / 2**20:.0f} MiB)" for m in self if m.status == "ready")
            raise APIError(503, f"the model {coming.id!r} needs about {extra / 2**20:.0f} MiB and the memory budget of "
                                f"{self.budget / 2**20:.0f} MiB is held by busy models: {held}; retry later or raise "
                                "--models-memory", "server_error", code="memory_budget",
                           headers={"Retry-After": "5"})  # fmt: skip

    def close(self) -> None:
        for m in self:
            if m.status == "ready":
                m.unload()


def _default_source() -> str:
    from cera.sources import bundles

    return bundles.DEFAULT_MODEL


_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 10**3, "kib": 2**10, "m": 2**20, "mb": 10**6, "mib": 2**20,
          "g": 2**30, "gb": 10**9, "gib": 2**30, "t": 2**40, "tb": 10**12, "tib": 2**40}  # fmt: skip


def parse_size(text: str) -> int:
    """A size such as ``6GiB``, ``512MB`` or ``1073741824`` in bytes."""
    import re

    from cera.errors import InvalidOptions

    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS:
        raise InvalidOptions(f"--models-memory {text!r} is not a size: write e.g. 6GiB, 512MiB or a number of bytes")
    return int(float(m.group(1)) * _UNITS[unit])
