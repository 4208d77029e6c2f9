"""What a worker needs to load a model: a small, picklable description, never the model.

Ray ships constructor arguments to every replica and every Ray Data actor, possibly on
other machines. A loaded model holds memory maps, compiled kernels and threads, none of
which travel; so each worker receives this spec and loads its own copy, finding cera's
plugins through the entry points installed on that machine, as any cera process does.
"""

from __future__ import annotations

import attrs

from cera.errors import CeraError


class RayConfigError(CeraError):
    """A cera-ray setting that cannot work; the message names it and what to change."""


def _positive_or_none(name: str):
    def check(_inst, _attr, value):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise RayConfigError(f"{name} must be a positive integer or None, got {value!r}")

    return check


@attrs.frozen
class ModelSpec:
    """A model and how to run it in one worker.

    ``model``: a GGUF path (that exists on every node), a bundle name or a Hub repository,
    as ``cera run -m`` takes; None for the default bundle. ``parallel``: sequences one
    worker decodes together (its scheduler's slots). ``threads``: CPU threads per worker
    (default: the backend's; set it to the CPUs Ray gives the worker)."""

    model: str | None = None
    device: str = "auto"
    threads: int | None = attrs.field(default=None, validator=_positive_or_none("threads"))
    parallel: int = attrs.field(default=4, validator=_positive_or_none("parallel"))
    n_ctx: int | None = attrs.field(default=None, validator=_positive_or_none("n_ctx"))

    def __attrs_post_init__(self):
        if self.model is not None and not isinstance(self.model, str):
            raise RayConfigError(f"model must be a path, bundle name or repository as a string, got {self.model!r}")
        if not isinstance(self.device, str) or not self.device:
            raise RayConfigError(f"device must be a backend name or 'auto', got {self.device!r}")

    def load(self):
        """Load the model in this process (a worker), quietly."""
        import cera
        from cera.sources import bundles

        return cera.load(self.model or bundles.DEFAULT_MODEL, device=self.device, threads=self.threads, quiet=True)

    @classmethod
    def of(cls, spec=None, **fields) -> ModelSpec:
        """A spec from a spec, a model name/path, or a dict of fields, with overrides."""
        if spec is None:
            return cls(**fields)
        if isinstance(spec, ModelSpec):
            return attrs.evolve(spec, **fields) if fields else spec
        if isinstance(spec, str):
            return cls(model=spec, **fields)
        if isinstance(spec, dict):
            names = {f.name for f in attrs.fields(cls)}
            unknown = sorted(set(spec) - names)
            if unknown:
                raise RayConfigError(f"unknown model setting(s) {unknown}; known: {', '.join(sorted(names))}")
            return cls(**{**spec, **fields})
        raise RayConfigError(f"a model spec is a ModelSpec, a model name or path, or a dict; got {type(spec).__name__}")
