"""The adapters a forward pass applies: an ordered set of (adapter, scale).

`ActiveAdapters` is what a session or a request holds; its `key` (each adapter's
fingerprint and scale) is part of the key of compiled graphs, of prefix-cache entries and
of checkpoints, so state computed under one set of adapters is never reused under another.
`by_target` is what the graph builder reads: for each adapted weight, its pairs with their
effective scales, in the order the adapters were given (llama.cpp's order of additions).
An adapter whose effective scale is 0 adds nothing and is left out, so scale 0 is the base
model exactly.
"""

from __future__ import annotations

import math

import attrs

from ..errors import AdapterError
from .lora import LoraAdapter, LoraPair


@attrs.frozen(eq=False, slots=False)
class ActiveAdapters:
    items: tuple[tuple[LoraAdapter, float], ...] = ()

    def __attrs_post_init__(self):
        seen = set()
        for adapter, scale in self.items:
            if not isinstance(adapter, LoraAdapter):
                raise AdapterError(f"expected a loaded LoRA adapter, got {type(adapter).__name__}")
            if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
                raise AdapterError(f"adapter {adapter.name!r}: scale {scale!r} must be a finite number")
            if adapter.fingerprint in seen:
                raise AdapterError(f"adapter {adapter.name!r} is given twice; give it once with the sum of its scales")
            seen.add(adapter.fingerprint)
        object.__setattr__(self, "_key", tuple((a.fingerprint, float(s)) for a, s in self.items if s != 0))
        table: dict[str, list[tuple[LoraPair, float]]] = {}
        for adapter, scale in self.items:
            for target, pair in adapter.pairs.items():
                s = adapter.effective_scale(pair, scale)
                if s != 0:
                    table.setdefault(target, []).append((pair, s))
        object.__setattr__(self, "_table", {k: tuple(v) for k, v in table.items()})

    @property
    def key(self) -> tuple:
        """What identifies these adapters' effect: (fingerprint, scale) of each, in order."""
        return self._key

    def by_target(self) -> dict[str, tuple[tuple[LoraPair, float], ...]]:
        return self._table

    def __bool__(self) -> bool:
        return bool(self._key)

    def __eq__(self, other) -> bool:
        return isinstance(other, ActiveAdapters) and other._key == self._key

    def __hash__(self) -> int:
        return hash(self._key)

    def describe(self) -> str:
        return ", ".join(f"{a.name}:{s:g}" for a, s in self.items) or "none"


NO_ADAPTERS = ActiveAdapters()

__all__ = ["NO_ADAPTERS", "ActiveAdapters"]
