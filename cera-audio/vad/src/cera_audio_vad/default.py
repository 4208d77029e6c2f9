"""The default VAD model: Silero VAD converted from the silero-vad package, cached.

On first use the official ONNX file is fetched (bundle ``silero-vad``: the silero-vad
package from PyPI, SHA-256 checked, see `cera.sources.bundles`), converted to GGUF and written to
``<cera cache>/converted/``, atomically, beside a small JSON record of its SHA-256. Later
uses check the file against that record and convert again if it does not match (a
damaged or half-copied file is never used).
"""

from __future__ import annotations

from pathlib import Path

from cera.sources import bundles
from cera.sources.converted import cached_conversion

BUNDLE = "silero-vad"
FILE_NAME = "silero-vad-6.2.3.gguf"


def default_model_path(quiet: bool = False) -> Path:
    """The cached default GGUF, converting it first if it is missing or does not verify."""
    from .convert import CONVERTER_VERSION, convert

    def make(path: Path) -> None:
        convert(bundles.fetch_file(BUNDLE, quiet=quiet), path)

    source = {"bundle": BUNDLE, "converter": CONVERTER_VERSION}
    return cached_conversion(FILE_NAME, source, make, label=BUNDLE, quiet=quiet)
