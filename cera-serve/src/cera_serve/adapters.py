"""LoRA adapters on the server: loaded once (`cera serve --lora NAME=FILE`), chosen per request.

A request picks its adapters in one of two ways, or runs the base model:

- ``"model": NAME`` names an adapter (they are listed in ``/v1/models`` beside the base
  model, each with its ``parent``): that adapter at the scale it was given on the command
  line. What OpenAI clients can send with no extension.
- ``"lora": [{"id": 0, "scale": 0.5}, ...]``, llama.cpp's server field (ids as listed by
  ``GET /lora-adapters``; ``"name"`` may stand for ``"id"``, and a missing scale is the
  adapter's own): several adapters at once, with their scales. It wins over ``model``;
  ``"lora": []`` is the base model.

Sequences with different adapters (or none) decode in the same scheduler step, one pass per
set of adapters; the prefix cache keeps their prompts apart.
"""

from __future__ import annotations

import math
from pathlib import Path

import attrs


@attrs.frozen
class AdapterSpec:
    """One ``--lora`` of the command line: the name requests use, the file, the default scale."""

    name: str
    path: str
    scale: float = 1.0


def parse_spec(value: str, scale: float | None = None) -> AdapterSpec:
    """``[NAME=]FILE[:SCALE]`` (``--lora``) or, with ``scale``, ``[NAME=]FILE`` (``--lora-scaled``).
    Without a name the adapter is called by its file's stem."""
    name, sep, rest = value.partition("=")
    if not sep or not name or "/" in name or Path(value).expanduser().exists():
        name, rest = "", value
    path = rest
    if scale is None:
        scale = 1.0
        head, colon, tail = rest.rpartition(":")
        if colon and head and not Path(rest).expanduser().exists():
            try:
                path, scale = head, float(tail)
            except ValueError:
                pass
    if not path:
        raise ValueError(f"--lora {value!r}: give an adapter file, as NAME=FILE or FILE")
    if not math.isfinite(scale):
        raise ValueError(f"--lora {value!r}: the scale must be a finite number")
    name = name or Path(path).expanduser().name.removesuffix(".gguf") or path
    return AdapterSpec(name, path, float(scale))


class ServedAdapters:
    """The adapters a server loaded, in command-line order (their ids)."""

    def __init__(self, loaded, specs):
        self.entries: list[tuple[AdapterSpec, object]] = []
        names = set()
        for spec in specs:
            if spec.name in names:
                raise ValueError(f"two --lora adapters are named {spec.name!r}; name them NAME=FILE")
            names.add(spec.name)
            self.entries.append((spec, loaded.load_adapter(spec.path, name=spec.name)))

    def listing(self) -> list[dict]:
        """What ``GET /lora-adapters`` answers (llama.cpp's fields, and the name)."""
        return [{"id": i, "name": s.name, "path": s.path, "scale": s.scale} for i, (s, _) in enumerate(self.entries)]

    def names(self) -> list[str]:
        return [s.name for s, _ in self.entries]

    def choose(self, data: dict, error):
        """The adapters a request asks for (see the module docstring) as ``(ActiveAdapters,
        the model name to answer with or None)``; ``error(message, param)`` makes the
        exception for a bad request."""
        from cera.adapters import NO_ADAPTERS, ActiveAdapters
        from cera.errors import AdapterError

        field = data.get("lora")
        if field is None:
            model = data.get("model")
            for spec, adapter in self.entries:
                if model == spec.name:
                    return ActiveAdapters(((adapter, spec.scale),)), spec.name
            return NO_ADAPTERS, None
        if not isinstance(field, list):
            raise error("'lora' must be a list of {\"id\": N, \"scale\": S} objects", "lora")
        items, seen = [], set()
        for i, entry in enumerate(field):
            if not isinstance(entry, dict):
                raise error(f"lora[{i}] must be an object like {{\"id\": 0, \"scale\": 1.0}}", "lora")
            found = self._find(entry, i, error)
            if found[0].name in seen:
                raise error(f"lora[{i}]: adapter {found[0].name!r} is given twice", "lora")
            seen.add(found[0].name)
            spec, adapter = found
            scale = entry.get("scale", spec.scale)
            if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
                raise error(f"lora[{i}].scale must be a finite number, got {scale!r}", "lora")
            items.append((adapter, float(scale)))
        try:
            return ActiveAdapters(tuple(items)), None
        except AdapterError as e:
            raise error(str(e), "lora") from None

    def _find(self, entry: dict, i: int, error):
        known = ", ".join(f"{n} (id {k})" for k, n in enumerate(self.names())) or "none (start the server with --lora)"
        if "id" in entry:
            k = entry["id"]
            if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < len(self.entries):
                raise error(f"lora[{i}].id {k!r} is not a loaded adapter; loaded: {known}", "lora")
            return self.entries[k]
        if "name" in entry:
            for spec, adapter in self.entries:
                if spec.name == entry["name"]:
                    return spec, adapter
            raise error(f"lora[{i}].name {entry['name']!r} is not a loaded adapter; loaded: {known}", "lora")
        raise error(f"lora[{i}] needs an \"id\" or a \"name\"; loaded: {known}", "lora")


__all__ = ["AdapterSpec", "ServedAdapters", "parse_spec"]
