"""Loading a model: source -> GGUF file -> family plugin -> backend -> a loaded model.

`load` resolves the source (`cera.hub`), parses the GGUF file, finds the family plugin
registered for its `general.architecture`, and picks a backend. ``device="auto"`` takes
the highest-priority installed backend that is usable here and has a kernel for every
tensor type in the file, and records why it passed over the others
(`LoadedModel.backend_notes`); a backend asked for by name that cannot serve the file is
an error, never a silent fallback.
"""

from __future__ import annotations

from pathlib import Path

from . import hub
from .backend import Backend
from .errors import BackendUnavailable, PluginError, UnsupportedOperation, UnsupportedTensorType
from .gguf import GGUFFile
from .plugins import PluginManager, get_manager
from .registry import BackendSpec, load_factory

DEFAULT_N_CTX = 4096


def admission(spec: BackendSpec, gguf: GGUFFile) -> str | None:
    """None if the backend declares it can serve every tensor of the file, else why not."""
    reason = spec.unavailable_reason()
    if reason:
        return reason
    served = set(spec.tensor_types)
    for info in gguf.tensors.values():
        if info.type_name not in served:
            return f"no kernel for tensor {info.name!r} of type {info.type_name}"
    return None


def choose_backend(gguf: GGUFFile, device: str, manager: PluginManager, **options) -> tuple[Backend, list[str]]:
    explicit = device != "auto"
    if explicit:
        candidates = [manager.backend_spec(device)]
    else:
        candidates = sorted(manager.backends.values(), key=lambda s: (-s.priority, s.name))
        if not candidates:
            raise BackendUnavailable(
                "no backend is installed; install one, e.g. `pip install cera-backend-cpu` (see `cera plugins`)"
            )
    notes = []
    for spec in candidates:
        reason = admission(spec, gguf)
        if reason is None:
            try:
                backend = load_factory(spec.factory)(**options)
                info = backend.probe()
                if not info.usable:
                    reason = info.reason or "probe reports it unusable"
            except (BackendUnavailable, PluginError) as e:
                reason = str(e)
        if reason is None:
            return backend, notes
        if explicit:
            raise BackendUnavailable(f"backend {spec.name!r} cannot run {gguf.path.name}: {reason}")
        notes.append(f"{spec.name}: {reason}")
    raise BackendUnavailable(f"no installed backend can run {gguf.path.name}: " + "; ".join(notes))


class LoadedModel:
    """A model ready to run: family model on a backend, tokenizer, chat template."""

    def __init__(self, path: Path, gguf: GGUFFile, model, backend: Backend, family: str, backend_notes: list[str]):
        from .chat_template import ChatTemplate
        from .tokenizer import Tokenizer

        self.path = path
        self.gguf = gguf
        self.model = model
        self.backend = backend
        self.family = family
        self.backend_notes = backend_notes
        self.tokenizer = Tokenizer.from_gguf(gguf)
        self.chat_template = ChatTemplate.from_gguf(gguf)

    @property
    def architecture(self) -> str:
        return self.gguf.architecture

    @property
    def name(self) -> str:
        return self.gguf.name or self.path.stem

    @property
    def n_ctx_train(self) -> int:
        return self.model.n_ctx_train

    def new_session(self, n_ctx: int | None = None, kv_type: str = "f16", n_batch: int = 512):
        """A fresh session. ``n_ctx`` defaults to the training context, capped at 4096."""
        from .session import Session

        if n_ctx is None:
            n_ctx = min(DEFAULT_N_CTX, self.n_ctx_train) if self.n_ctx_train > 0 else DEFAULT_N_CTX
        return Session(self, n_ctx=n_ctx, kv_type=kv_type, n_batch=n_batch)

    def chat(self, system: str | None = None, **session_options):
        """A chat on a fresh session, using the model's chat template."""
        from .chat import Chat

        return Chat(self.new_session(**session_options), system=system)

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        return self.tokenizer.encode(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, ids) -> str:
        return self.tokenizer.decode(ids)

    def generate(self, prompt: str, **options) -> str:
        """One-shot completion of raw text on a fresh session."""
        session = self.new_session()
        session.append_text(prompt)
        return session.generate(**options).text

    def close(self) -> None:
        self.backend.close()
        self.gguf.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self) -> str:
        return f"<LoadedModel {self.name!r} arch={self.architecture} family={self.family} backend={self.backend.name}>"


def load(
    source, device: str = "auto", threads: int | None = None, quiet: bool = False, manager: PluginManager | None = None
) -> LoadedModel:
    """Load a model from a path, a bundle name or a Hugging Face repo (see `cera.hub`)."""
    path = hub.resolve(source, quiet=quiet)
    gguf = GGUFFile(path)
    try:
        manager = manager or get_manager()
        family = manager.family_for(gguf.architecture)
        model_cls = load_factory(family.factory)
        options = {} if threads is None else {"threads": threads}
        backend, notes = choose_backend(gguf, device, manager, **options)
        missing = [op for op in getattr(model_cls, "required_ops", ()) if backend.ops and op not in backend.ops]
        if missing:
            raise UnsupportedOperation(
                f"backend {backend.name!r} lacks ops {missing} that the {family.name} family needs"
            )
        model = model_cls(gguf, backend)
        return LoadedModel(path, gguf, model, backend, family.name, notes)
    except BaseException:
        gguf.close()
        raise


__all__ = ["LoadedModel", "admission", "choose_backend", "load", "UnsupportedTensorType"]
