"""The one exception hierarchy of cera.

Every error names the thing that went wrong (a file and a byte offset, a tensor and
its type, an architecture and the families that are installed, ...) and, where there
is one, what the user can do about it. Code that catches errors catches `CeraError`.
"""

from __future__ import annotations


class CeraError(Exception):
    """Base class of every error cera raises on purpose."""


class InvalidModelFile(CeraError):
    """A model file is malformed, truncated or hostile.

    `path` and `offset` say where; `reason` says what was wrong there.
    """

    def __init__(self, path, offset: int | None, reason: str):
        self.path = str(path)
        self.offset = offset
        self.reason = reason
        where = f" at byte {offset}" if offset is not None else ""
        super().__init__(f"{self.path}: invalid GGUF file{where}: {reason}")


class ModelNotFound(CeraError):
    """A model source (path, bundle id, hub repo) does not resolve to a file."""


class DownloadError(CeraError):
    """Fetching a model or a package that carries one failed, or its checksum did not match."""


class PluginError(CeraError):
    """A plugin could not be loaded or registered something invalid."""


class UnsupportedArchitecture(CeraError):
    """No installed model family serves a GGUF `general.architecture`."""

    def __init__(self, architecture: str, installed: dict[str, str] | None = None, plugins_disabled: bool = False):
        from .plugins.distributions import architecture_hint

        self.architecture = architecture
        self.installed = installed or {}
        served = ", ".join(sorted(self.installed)) or "none"
        # the hint names only distributions that exist, and none that is already installed
        super().__init__(
            f"no installed model family serves architecture {architecture!r} "
            f"(architectures served now: {served}); {architecture_hint(architecture, plugins_disabled)}"
        )


class ModelConfigError(CeraError):
    """A model family does not understand (or misses) a metadata key of the file."""


class BackendUnavailable(CeraError):
    """A backend cannot run here (no device, missing driver, not implemented yet)."""


class UnsupportedTensorType(CeraError):
    """A backend has no kernel for a tensor's GGML type."""

    def __init__(self, tensor: str, ggml_type: str, backend: str, detail: str = ""):
        self.tensor = tensor
        self.ggml_type = ggml_type
        self.backend = backend
        extra = f" ({detail})" if detail else ""
        super().__init__(
            f"backend {backend!r} cannot serve tensor {tensor!r} of type {ggml_type}{extra}; "
            f"choose another backend with --device, or use a file quantized to a type it supports"
        )


class InvalidOptions(CeraError, ValueError):
    """An option (sampling, generation, backend, session) has a value outside its range."""


class IncompatibleDraft(InvalidOptions):
    """A draft model for speculative decoding whose vocabulary is not the target's."""


class ResourceExhausted(CeraError):
    """Memory (or another resource) ran out: a context too large for the machine, a model
    bigger than the device, a state that does not fit its memory limit."""


class ShapeError(CeraError, ValueError):
    """An op got tensors whose shapes do not fit together (a bug in the calling model)."""


class UnsupportedOperation(CeraError):
    """A backend lacks an op that a model needs."""


class TokenizerError(CeraError):
    """The tokenizer metadata of a file is missing, unknown or inconsistent."""


class TemplateError(CeraError):
    """A chat template failed to render, or tried something the sandbox forbids."""


class GrammarError(CeraError):
    """A grammar failed to parse; the message gives the position."""


class SessionError(CeraError):
    """A session was used wrongly (context full, bad token id, ...)."""


class GenerationError(CeraError):
    """Generation failed for a reason that is not bad input (the cause is attached)."""


class ContextFull(SessionError):
    """The tokens to evaluate do not fit in the session's context window."""


class AudioError(CeraError):
    """Audio input is unreadable, empty, or not in a form the component accepts."""
