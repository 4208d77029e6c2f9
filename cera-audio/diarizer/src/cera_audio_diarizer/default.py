"""The default speaker encoder: resemblyzer's GE2E encoder converted to GGUF, cached.

On first use ``pretrained.pt`` is fetched (bundle ``resemblyzer-ge2e``: the resemblyzer
package from PyPI, SHA-256 checked, see `cera.sources.bundles`), converted to GGUF without torch
and written to ``<cera cache>/converted/``, atomically, beside a small JSON record of its
SHA-256 and the converter version. Later uses check the file against that record and
convert again if it does not match (a damaged or half-copied file is never used).
"""

from __future__ import annotations

from pathlib import Path

from cera.sources import bundles
from cera.sources.converted import cached_conversion

BUNDLE = "resemblyzer-ge2e"
FILE_NAME = "resemblyzer-ge2e-0.1.4.gguf"


def default_model_path(quiet: bool = False) -> Path:
    """The cached default GGUF, converting it first if it is missing or does not verify."""
    from .convert import CONVERTER_VERSION, convert

    def make(path: Path) -> None:
        convert(bundles.fetch_file(BUNDLE, quiet=quiet), path)

    source = {"bundle": BUNDLE, "converter": CONVERTER_VERSION}
    return cached_conversion(FILE_NAME, source, make, label=BUNDLE, quiet=quiet)
