"""cera: a GGUF inference engine for LLMs and speech, built from plugins.

The core defines the interfaces (`Model`, `Backend`, `Session`, `Sink`), reads GGUF files,
tokenizes, and discovers plugins (model families, backends, audio components, CLI
commands) through the ``cera`` entry-point group. The names below are the stable public
API; the modules behind them live in rooms by concept (``cera.graph``, ``cera.blocks``,
``cera.plugins``, ``cera.sources``, ``cera.formats``, ``cera.text``, ``cera.generation``,
``cera.chat``, ``cera.grammar``, ``cera.tools``, ``cera.audio``, ``cera.testing``).

Heavy modules load lazily: importing ``cera`` imports no backend, no model family and no
numpy; a name such as ``cera.Session`` imports its module on first use.
"""

from __future__ import annotations

import importlib
from importlib import metadata as _metadata

from .errors import (
    AudioError,
    BackendUnavailable,
    CeraError,
    ContextFull,
    DownloadError,
    GenerationError,
    GrammarError,
    IncompatibleDraft,
    InvalidModelFile,
    InvalidOptions,
    ModelConfigError,
    ModelNotFound,
    PluginError,
    ResourceExhausted,
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


# Public names whose modules are imported on first use: name -> module.
_LAZY = {
    # the four interfaces, and what they are made of
    "Model": "cera.model",
    "Weights": "cera.model",
    "Backend": "cera.backend",
    "BackendOptions": "cera.backend",
    "DeviceInfo": "cera.backend",
    "Executable": "cera.backend",
    "StepInputs": "cera.backend",
    "Weight": "cera.backend",
    "Session": "cera.generation.session",
    "Sink": "cera.generation.sink",
    "CollectingSink": "cera.generation.sink",
    "FinishReason": "cera.generation.sink",
    # the graph a family builds, and the state it declares
    "Graph": "cera.graph.builder",
    "GraphBuilder": "cera.graph.builder",
    "Layout": "cera.graph.builder",
    "Outputs": "cera.graph.builder",
    "Tensor": "cera.graph.builder",
    "WeightRef": "cera.graph.builder",
    "OPS": "cera.graph.ops",
    "AttentionSpec": "cera.graph.ops",
    "RopeSpec": "cera.graph.ops",
    "StateSpec": "cera.state",
    "StateRef": "cera.state",
    "AttentionKV": "cera.state",
    "ShortConv": "cera.state",
    "SSMState": "cera.state",
    "CrossKV": "cera.state",
    "HostState": "cera.state",
    # the shared blocks families are made of
    "HParams": "cera.blocks.hparams",
    "DecoderConfig": "cera.blocks.decoder",
    "DecoderModel": "cera.blocks.decoder",
    # loading and running
    "LoadedModel": "cera.engine",
    "LocalModel": "cera.sources.resolver",
    "GGUFFile": "cera.formats.gguf",
    "Tokenizer": "cera.text.tokenizer",
    "ChatTemplate": "cera.text.chat_template",
    "GenerateOptions": "cera.generation.options",
    "SamplingOptions": "cera.generation.sampling",
    "Processor": "cera.generation.sampling",
    "Candidates": "cera.generation.sampling",
    "TokenEvent": "cera.generation.events",
    "EndEvent": "cera.generation.events",
    "GenerationSummary": "cera.generation.events",
    "Scheduler": "cera.generation.scheduler",
    "ChatSession": "cera.chat.session",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cera' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "AudioComponent",
    "AudioError",
    "BackendSpec",
    "BackendUnavailable",
    "CeraError",
    "ContextFull",
    "DownloadError",
    "ENTRY_POINT_GROUP",
    "GenerationError",
    "GrammarError",
    "IncompatibleDraft",
    "InvalidModelFile",
    "InvalidOptions",
    "ModelConfigError",
    "ModelFamily",
    "ModelNotFound",
    "PLUGIN_API_VERSION",
    "PluginError",
    "ResourceExhausted",
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
    *sorted(_LAZY),
]
