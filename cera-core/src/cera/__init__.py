"""cera: a GGUF inference engine for LLMs and speech, built from plugins.

The core defines the interfaces (Backend, Model, Session, Sink), reads GGUF files,
tokenizes, and discovers plugins (model families, backends, audio components, CLI
commands) through the ``cera`` entry-point group. Heavy modules load lazily: importing
``cera`` imports no backend and no model family.
"""

from __future__ import annotations

from importlib import metadata as _metadata

from .errors import (
    AudioError,
    BackendUnavailable,
    CeraError,
    ContextFull,
    DownloadError,
    GrammarError,
    InvalidModelFile,
    ModelConfigError,
    ModelNotFound,
    PluginError,
    SessionError,
    ShapeError,
    TemplateError,
    TokenizerError,
    UnsupportedArchitecture,
    UnsupportedOperation,
    UnsupportedTensorType,
)
from .plugins.hookspecs import hookimpl
from .plugins.manager import ENTRY_POINT_GROUP, PLUGIN_API_VERSION
from .plugins.registry import AudioComponent, BackendSpec, ModelFamily

try:
    __version__ = _metadata.version("cera-core")
except _metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0+unknown"


def load(source, device: str = "auto", **options):
    """Load a model: see `cera.engine.load`."""
    from .engine import load as _load

    return _load(source, device=device, **options)


__all__ = [
    "AudioComponent",
    "AudioError",
    "BackendSpec",
    "BackendUnavailable",
    "CeraError",
    "ContextFull",
    "DownloadError",
    "ENTRY_POINT_GROUP",
    "GrammarError",
    "InvalidModelFile",
    "ModelConfigError",
    "ModelFamily",
    "ModelNotFound",
    "PLUGIN_API_VERSION",
    "PluginError",
    "SessionError",
    "ShapeError",
    "TemplateError",
    "TokenizerError",
    "UnsupportedArchitecture",
    "UnsupportedOperation",
    "UnsupportedTensorType",
    "__version__",
    "hookimpl",
    "load",
]
