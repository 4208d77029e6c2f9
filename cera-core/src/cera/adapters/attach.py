"""Adapters on a loaded model: read, checked against it, uploaded beside its weights.

`attach` checks an adapter against the base model (architecture, every target's name and
shape, and that the family's graph uses every target in a product that can be adapted:
an adapter is applied whole or refused), uploads its tensors to the model's backend (the
base weights stay as they are: nothing is reloaded or merged), compiles a one-token pass
with it (so what the backend's kernels cannot run, such as the Vulkan products' rows of a
multiple of 8 values, which an adapter's rank must then be, is refused here), and keeps it
by name on the `LoadedModel`. `resolve` turns what a caller gives (adapters, names, paths, with scales)
into the `ActiveAdapters` a session or a request applies.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import AdapterError, CeraError
from ..graph.builder import LAST_LOGITS, Layout
from .active import NO_ADAPTERS, ActiveAdapters
from .lora import LoraAdapter


def attach(loaded, adapter: LoraAdapter) -> LoraAdapter:
    """Make ``adapter`` usable on ``loaded`` (see the module docstring); an adapter with the
    same values attached before is returned instead of uploading it twice."""
    for known in loaded.adapters.values():
        if known.fingerprint == adapter.fingerprint:
            adapter.close()
            return known
    if adapter.name in loaded.adapters:
        raise AdapterError(f"an adapter named {adapter.name!r} is attached already; give this one another name")
    weights = loaded.model.weights
    adapter.check_fits(loaded.architecture, weights.tensors, weights.used)
    for pair in adapter.pairs.values():
        for ref in (pair.a, pair.b):
            reason = loaded.backend.cannot_serve(ref.ggml_type)
            if reason:
                raise AdapterError(f"{adapter.path}: tensor {ref.name!r} is {ref.ggml_type}: {reason}")
    try:  # every target in an adaptable product, and the backend runs every op it adds
        graph = loaded.model.build(Layout((1,)), LAST_LOGITS, n_ctx=8, adapters=ActiveAdapters(((adapter, 1.0),)))
        loaded.backend.check_ops(graph)
    except AdapterError as e:
        raise AdapterError(f"{adapter.path}: {e}") from None
    except CeraError as e:
        raise AdapterError(f"{adapter.path}: the adapted graph cannot be built on backend {loaded.backend.name!r}: {e}") from e
    uploaded = {}
    for name in adapter.weight_names:
        uploaded[name] = loaded.backend.upload(adapter.source, name)
    loaded.runner.weights.update(uploaded)
    try:  # a one-token pass compiled for real: what the backend's kernels refuse is said now, not at the first request
        probe = loaded.runner.new_state(8, n_batch=8)
        loaded.runner.executable(Layout((1,)), LAST_LOGITS, probe, ActiveAdapters(((adapter, 1.0),)))
    except CeraError as e:
        for name in uploaded:
            loaded.runner.weights.pop(name, None)
        raise AdapterError(f"{adapter.path}: backend {loaded.backend.name!r} cannot run this adapter: {e}") from e
    loaded.adapters[adapter.name] = adapter
    return adapter


def _one(loaded, item) -> LoraAdapter:
    if isinstance(item, LoraAdapter):
        if loaded.adapters.get(item.name) is not item:
            return attach(loaded, item)
        return item
    if isinstance(item, str) and item in loaded.adapters:
        return loaded.adapters[item]
    if isinstance(item, str) or hasattr(item, "__fspath__"):
        return loaded.load_adapter(item)
    raise AdapterError(f"an adapter is a LoraAdapter, the name of an attached one or a path, not {type(item).__name__}")


def resolve(loaded, spec) -> ActiveAdapters:
    """``spec``: None, an `ActiveAdapters`, or adapters each given as a `LoraAdapter`, the
    name of an attached one or a path (loaded and attached), alone (scale 1) or as
    ``(adapter, scale)``; a mapping ``{adapter: scale}`` too."""
    if spec is None:
        return NO_ADAPTERS
    if isinstance(spec, ActiveAdapters):
        return spec
    if isinstance(spec, dict):
        spec = list(spec.items())
    elif isinstance(spec, (str, LoraAdapter)) or hasattr(spec, "__fspath__"):
        spec = [spec]
    if not isinstance(spec, Iterable):
        raise AdapterError(f"adapters are given as a list of adapters or (adapter, scale) pairs, not {type(spec).__name__}")
    items = []
    for item in spec:
        if isinstance(item, tuple) and len(item) == 2:
            adapter, scale = item
        else:
            adapter, scale = item, 1.0
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise AdapterError(f"the scale of adapter {adapter!r} must be a number, got {scale!r}")
        items.append((_one(loaded, adapter), float(scale)))
    return ActiveAdapters(tuple(items))


__all__ = ["attach", "resolve"]
