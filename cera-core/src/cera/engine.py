"""Loading a model: source -> GGUF file -> family -> config -> admission -> bind.

1. **Config** (pure): the family registered for the file's `general.architecture` reads
   its metadata; every `{arch}.*` key is understood or refused.
2. **References**: the family binds the file's tensors by name as graph references and
   declares its state; a tensor it never asks for is refused, naming it.
3. **Admission** (`admission`, the one check `load` and `cera inspect` share): is the
   backend usable here, does it have a kernel for every tensor type, does it implement
   every op of the model's graphs, does the model fit its memory. ``device="auto"``
   takes the highest-priority backend that passes and records why it passed over the
   others (`LoadedModel.backend_notes`); a backend asked for by name that fails is an
   error, never a silent fallback.
4. **Bind**: the weights are uploaded to the chosen backend.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from . import sources
from .backend import Backend, BackendOptions, DeviceInfo
from .errors import (
    BackendUnavailable,
    CeraError,
    InvalidOptions,
    ModelConfigError,
    PluginError,
    ShapeError,
    UnsupportedOperation,
    UnsupportedTensorType,
)
from .formats.gguf import GGUFFile
from .graph.builder import LAST_LOGITS, Layout, Outputs
from .model import Weights
from .plugins.manager import PluginManager, get_manager
from .plugins.registry import BackendSpec, load_factory
from .state import estimate_bytes

DEFAULT_N_CTX = 4096
HOST_HINTS = frozenset({"threads"})  # options only backends with host threads take


def model_ops(model, n_ctx: int = DEFAULT_N_CTX) -> set[str]:
    """The ops a model's graphs use: a prompt pass and a decode pass, built symbolically."""
    ops: set[str] = set()
    for layout, outputs in ((Layout((2,)), LAST_LOGITS), (Layout((1,)), Outputs(("argmax",)))):
        try:
            graph = model.build(layout, outputs, n_ctx=n_ctx)
        except UnsupportedOperation:  # a model without a head (an encoder): its hidden states
            graph = model.build(layout, Outputs(("hidden",)), n_ctx=n_ctx)
        ops |= graph.ops_used()
    return ops


def admission(spec: BackendSpec, gguf: GGUFFile, ops: set[str] | None = None) -> str | None:
    """None if the backend declares it can run the file (every tensor type and, when
    ``ops`` is given, every op of the model's graphs), else why not."""
    reason = spec.unavailable_reason()
    if reason:
        return reason
    served = set(spec.tensor_types)
    for info in gguf.tensors.values():
        if info.type_name not in served:
            return f"no kernel for tensor {info.name!r} of type {info.type_name}"
    if ops is not None:
        missing = sorted(set(ops) - set(spec.ops))
        if missing:
            return f"lacks op{'s' if len(missing) > 1 else ''} {', '.join(missing)} that this model uses"
    return None


def memory_check(info: DeviceInfo, gguf: GGUFFile, model, n_ctx: int) -> str | None:
    """None if the weights and a default session's state fit the memory a backend's probe
    reports (``info``)."""
    if info.memory_bytes is None:
        return None
    need = sum(t.nbytes for t in gguf.tensors.values()) + estimate_bytes(model.state, n_ctx)
    if need > info.memory_bytes:
        return f"needs about {need / 2**30:.1f} GiB for the weights and a {n_ctx}-token context, it has {info.memory_bytes / 2**30:.1f} GiB"
    return None


def backend_options(spec: BackendSpec, options_type: type, given: dict) -> dict:
    """The options a backend's options type accepts, checked: an unknown one is an error."""
    fields = {f.name for f in attrs.fields(options_type)} if attrs.has(options_type) else set()
    # `threads` is how many host threads a backend may use: a device backend that has none
    # to set does not take it, and a thread count given for the CPU must not stop it.
    given = {k: v for k, v in given.items() if not (k in HOST_HINTS and k not in fields)}
    unknown = sorted(k for k, v in given.items() if v is not None and k not in fields)
    if unknown:
        raise InvalidOptions(
            f"backend {spec.name!r} has no option(s) {unknown}; it takes {', '.join(sorted(fields)) or 'none'}"
        )
    try:
        options_type(**{k: v for k, v in given.items() if v is not None})
    except (TypeError, ValueError) as e:
        raise InvalidOptions(f"backend {spec.name!r}: {e}") from None
    return {k: v for k, v in given.items() if v is not None}


class BackendNotes(list):
    """Why backends were passed over (a list of "name: reason"), and in ``quiet`` the
    passes that are expected on every run and said only when asked (-v): a GPU backend
    whose device is software-emulated, which ``auto`` leaves for the CPU."""

    def __init__(self, notes=(), quiet=()):
        super().__init__(notes)
        self.quiet = list(quiet)


def choose_backend(gguf: GGUFFile, device: str, manager: PluginManager, model=None, n_ctx: int = DEFAULT_N_CTX,
                   ops: set | None = None, **options) -> tuple[Backend, list[str]]:  # fmt: skip
    """The backend ``device`` names, or under "auto" the highest-priority one that can run
    the file (admission, the ops of ``model``'s graphs or the given ``ops``, memory; an
    emulated GPU only when named), with why others were passed over."""
    explicit = device != "auto"
    if explicit:
        candidates = [manager.backend_spec(device)]
    else:
        candidates = sorted(manager.backends.values(), key=lambda s: (-s.priority, s.name))
        if not candidates:
            from .plugins.distributions import no_backend_hint

            raise BackendUnavailable(f"no backend is loaded; {no_backend_hint(manager.allow == set())}")
    if ops is None and model is not None:
        ops = model_ops(model, n_ctx)
    notes = BackendNotes()  # why each real backend was passed over (placeholders would only repeat "not implemented")
    reasons = []  # every backend's, for the error when none can run it
    for spec in candidates:
        reason = admission(spec, gguf, ops)
        backend = None
        software = False
        if reason is None:
            try:
                factory = load_factory(spec.factory)
                opts = backend_options(spec, getattr(factory, "options_type", BackendOptions), options)
                backend = factory(**opts)
                # admission checked the ops against what the backend registered; the probe
                # runs once per candidate (a GPU's may query the device)
                try:
                    info = backend.probe()
                except CeraError as e:
                    info, reason = None, str(e)
                if info is not None and not info.usable:
                    reason = info.reason or "probe reports it unusable"
                elif info is not None and model is not None:
                    reason = memory_check(info, gguf, model, n_ctx)
                if reason is None and not explicit and info.software:
                    reason = f"{info.device} computes on the CPU (software emulation); ask for it by name to use it"
                    software = True
            except InvalidOptions:
                raise
            except (BackendUnavailable, PluginError) as e:
                reason = str(e)
            except (Exception, SystemExit) as e:  # the plugin's own failure: pass over it under auto
                reason = f"starting it failed: {type(e).__name__}: {e}"
        if reason is None:
            return backend, notes
        if backend is not None:
            try:
                backend.close()
            except Exception:  # noqa: BLE001 - a backend passed over must not abort the choice
                pass
        if explicit:
            raise BackendUnavailable(f"backend {spec.name!r} cannot run {gguf.path.name}: {reason}")
        reasons.append(f"{spec.name}: {reason}")
        if software:  # passing over an emulated GPU is expected: no note on every run, only with -v
            notes.quiet.append(reasons[-1])
        elif not spec.placeholder:
            notes.append(reasons[-1])
    raise BackendUnavailable(f"no installed backend can run {gguf.path.name}: " + "; ".join(reasons))


class LoadedModel:
    """A model ready to run: family model bound to a backend, tokenizer, chat template."""

    def __init__(self, path: Path, gguf: GGUFFile, model, backend: Backend, family: str, backend_notes: list[str],
                 weights: dict):  # fmt: skip
        from .text.chat_template import ChatTemplate
        from .generation.runtime import Runner
        from .text.tokenizer import Tokenizer

        self.path = path
        self.gguf = gguf
        self.model = model
        self.backend = backend
        self.family = family
        self.backend_notes = backend_notes
        self.runner = Runner(model, backend, weights)
        self.prefix_cache = None  # see enable_prefix_cache
        self.draft: LoadedModel | None = None  # see set_draft
        self.adapters: dict = {}  # LoRA adapters attached by name (load_adapter)
        self.default_adapters = None  # what new sessions apply when given none (`use_adapters`)
        self.projector = None  # a multimodal projector for images (load_projector)
        self.companions: dict = {}  # files a bundle names beside the model, by role
        self.tokenizer = Tokenizer.from_gguf(gguf)
        self.chat_template = ChatTemplate.from_gguf(gguf)
        self.runner.calibration_tokens = self._calibration_tokens

    def _calibration_tokens(self) -> list[int]:
        from .generation.key_offsets import CALIBRATION_TEXT

        return self.tokenizer.encode(CALIBRATION_TEXT, add_special=True)

    @property
    def architecture(self) -> str:
        return self.gguf.architecture

    @property
    def name(self) -> str:
        return self.gguf.name or self.path.stem

    @property
    def n_ctx_train(self) -> int:
        return self.model.n_ctx_train

    def default_n_ctx(self) -> int:
        return min(DEFAULT_N_CTX, self.n_ctx_train) if self.n_ctx_train > 0 else DEFAULT_N_CTX

    def new_session(self, n_ctx: int | None = None, kv_type: str = "f16", n_batch: int = 512, swa_full: bool = False,
                    adapters=None):  # fmt: skip
        """A fresh session. ``n_ctx`` defaults to the training context, capped at 4096;
        ``swa_full`` gives sliding-window layers whole-context caches (the same results,
        more memory); ``adapters``: LoRA adapters to apply (`cera.adapters.attach.resolve`)."""
        from .generation.session import Session

        n_ctx = self.default_n_ctx() if n_ctx is None else n_ctx
        adapters = self.default_adapters if adapters is None else adapters
        return Session(self, n_ctx=n_ctx, kv_type=kv_type, n_batch=n_batch, swa_full=swa_full, adapters=adapters)

    def use_adapters(self, adapters) -> None:
        """The LoRA adapters sessions made from now on apply when they are given none
        (``[]``: the base model); what `cera run --lora` sets."""
        from .adapters.attach import resolve

        self.default_adapters = resolve(self, adapters)

    def load_adapter(self, source, name: str | None = None):
        """Read a LoRA adapter (a llama.cpp GGUF adapter file or a PEFT directory), check it
        against this model and upload it beside the weights (`cera.adapters.attach`); the
        base model is not reloaded. Returns the `cera.adapters.LoraAdapter`."""
        from .adapters import load_adapter
        from .adapters.attach import attach

        return attach(self, load_adapter(source, self.gguf, name=name))

    def load_projector(self, path):
        """Bind a multimodal projector (an mmproj GGUF) to this model's backend, so its
        sessions take images (`Session.append_image`). Returns the `cera.vision.projector.Projector`."""
        from .errors import ModelNotFound
        from .vision.projector import Projector

        file = Path(path).expanduser()
        if not file.is_file():
            raise ModelNotFound(f"multimodal projector {path}: no such file (give the mmproj GGUF that goes with {self.path.name})")
        projector = Projector(file, self)
        if self.projector is not None:
            self.projector.close()
        self.projector = projector
        return projector

    def enable_prefix_cache(self, max_bytes: int = 512 * 2**20, directory=None, max_disk_bytes: int = 4 * 2**30):
        """Keep evaluated prompts so sessions whose prompt starts the same evaluate only the
        rest: in memory (``max_bytes``, shared by this model's sessions) and, with a
        ``directory``, on disk across processes (`cera.generation.prefix_cache`). Returns the cache."""
        from .generation.prefix_cache import PrefixCache

        self.prefix_cache = PrefixCache(self, max_bytes=max_bytes, directory=directory, max_disk_bytes=max_disk_bytes)
        return self.prefix_cache

    def set_draft(self, draft: LoadedModel | None) -> None:
        """Speculate with ``draft``, a loaded model of the same vocabulary (on any backend):
        each session's generations then draft with it and verify in one pass
        (`cera.generation.draft_model`; ``draft_max=0`` turns it off for one generation).
        Raises IncompatibleDraft when its vocabulary differs; None detaches it. The draft
        stays its caller's to close."""
        if draft is not None:
            from .generation.draft_model import check_vocabularies

            if not isinstance(draft, LoadedModel):
                raise InvalidOptions(f"a draft model is a LoadedModel from cera.load, not {type(draft).__name__}")
            check_vocabularies(self, draft)
        self.draft = draft

    def scheduler(self, n_slots: int = 4, n_ctx: int | None = None, kv_type: str = "f16", n_batch: int = 512,
                  prompt_chunk: int | None = None):  # fmt: skip
        """A batching scheduler: sessions made by it decode together, their prompts in chunks
        of ``prompt_chunk`` tokens between the decode steps (`cera.generation.scheduler`)."""
        from .generation.scheduler import PROMPT_CHUNK, Scheduler

        n_ctx = self.default_n_ctx() if n_ctx is None else n_ctx
        return Scheduler(self, n_slots=n_slots, n_ctx=n_ctx, kv_type=kv_type, n_batch=n_batch,
                         prompt_chunk=PROMPT_CHUNK if prompt_chunk is None else prompt_chunk)  # fmt: skip

    def chat(self, system: str | None = None, tools=None, *, tool_format=None, allow_reevaluation: bool = False,
             **session_options):  # fmt: skip
        """A chat coordinator (`cera.chat.session.ChatSession`) on a fresh session, with the model's
        chat template; ``tools`` are OpenAI-style function specs."""
        from .chat.session import ChatSession

        return ChatSession(self.new_session(**session_options), system=system, tools=tools, tool_format=tool_format,
                           allow_reevaluation=allow_reevaluation)  # fmt: skip

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        return self.tokenizer.encode(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, ids) -> str:
        return self.tokenizer.decode(ids)

    def generate(self, prompt: str, **options) -> str:
        """One-shot completion of raw text on a fresh session."""
        session = self.new_session()
        session.append_text(prompt)
        return session.generate(**options).text

    def embed(self, texts, pooling: str | None = None, normalize: bool = True, batch_tokens: int = 2048,
              adapters=None):  # fmt: skip
        """One vector per text (`cera.generation.embedding.embed`): ``[n_texts, dim]`` float32, L2-normalised
        unless ``normalize=False``; pooled as the file says (encoders) or by mean (decoders);
        ``pooling="none"``: a ``[n_tokens, dim]`` array per text; ``adapters``: LoRA adapters
        (default: those of `use_adapters`)."""
        from .generation.embedding import embed

        return embed(self, texts, pooling=pooling, normalize=normalize, batch_tokens=batch_tokens, adapters=adapters)

    def close(self) -> None:
        for adapter in self.adapters.values():
            adapter.close()
        if self.projector is not None:
            self.projector.close()
        self.backend.close()
        self.gguf.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self) -> str:
        return f"<LoadedModel {self.name!r} arch={self.architecture} family={self.family} backend={self.backend.name}>"


def read_model(gguf: GGUFFile, manager: PluginManager):
    """Steps 1 and 2: the family, its config, and the model bound to tensor references."""
    family, model, weights, _ = _read_model(gguf, manager)
    return family, model, weights


def _read_model(gguf: GGUFFile, manager: PluginManager):
    """`read_model`, and the ops of the model's graphs (built once, for the shape check and
    for admission)."""
    family = manager.family_for(gguf.architecture)
    model_cls = load_factory(family.factory)
    read_config = getattr(model_cls, "read_config", None)
    if read_config is None:
        raise PluginError(
            f"family {family.name!r} ({family.factory}) has no read_config: it was written for an older "
            f"plugin API (see examples/cera-model-example for the current Model interface)"
        )
    config = _family_step(gguf, family, "reading its hyperparameters", read_config, gguf)
    weights = Weights.from_gguf(gguf)
    model = _family_step(gguf, family, "binding its tensors", model_cls, config, weights)
    weights.check_all_used(family.name)
    # Every op's shapes, checked now on symbolic graphs (no weight is read): hyperparameters
    # that do not fit each other or the tensors are refused at load, naming them, instead of
    # failing at the first token.
    ops = _family_step(gguf, family, "building its graphs", model_ops, model)
    check_vocabulary(gguf, model)
    return family, model, weights, ops


def check_vocabulary(gguf: GGUFFile, model) -> None:
    """Token ids run from the tokenizer through the embedding table to the output head and
    back: every id the tokenizer makes must have an embedding row (the kernels index the
    table with it) and every id the head can choose must be one the tokenizer knows."""
    tokens = gguf.get_array("tokenizer.ggml.tokens", str)
    n_tokens = len(tokens) if tokens is not None else 0
    n_head = int(getattr(model, "n_vocab", 0) or 0)
    embd = gguf.tensors.get("token_embd.weight")
    n_embd_rows = embd.shape[1] if embd is not None and len(embd.shape) >= 2 else None
    if n_tokens and n_head and n_head != n_tokens:
        raise ModelConfigError(
            f"{gguf.path}: the output head has {n_head} rows but the vocabulary (tokenizer.ggml.tokens) has "
            f"{n_tokens} tokens; they must be the same"
        )
    if n_embd_rows is not None and n_embd_rows < max(n_head, n_tokens):
        raise ModelConfigError(
            f"{gguf.path}: the embedding table (token_embd.weight) has {n_embd_rows} rows for a vocabulary of "
            f"{max(n_head, n_tokens)} tokens"
        )


def hparams_summary(gguf: GGUFFile, limit: int = 900) -> str:
    """The file's `{arch}.*` values, compactly (arrays by length): what an error about
    inconsistent hyperparameters shows."""
    try:
        prefix = gguf.architecture + "."
    except CeraError:
        return "(no architecture)"
    parts = []
    for key, value in gguf.metadata.items():
        if key.startswith(prefix):
            shown = f"[{len(value)} values]" if hasattr(value, "__len__") and not isinstance(value, str) else repr(value)
            parts.append(f"{key}={shown}")
    text = ", ".join(parts)
    return text if len(text) <= limit else text[:limit] + ", ..."


def _family_step(gguf: GGUFFile, family, what: str, fn, *args):
    """A step of the family's code on this file's metadata: errors of arithmetic, indexing
    or shapes that the file's values cause become a ModelConfigError that names the file
    and lists its hyperparameters (the family's own checks name the key)."""
    try:
        return fn(*args)
    except ShapeError as e:
        raise ModelConfigError(
            f"{gguf.path}: the file's hyperparameters do not fit its tensors ({what} for the {family.name} family: "
            f"{e}); its hyperparameters: {hparams_summary(gguf)}"
        ) from e
    except CeraError:
        raise
    except (ArithmeticError, IndexError, ValueError, KeyError) as e:
        raise ModelConfigError(
            f"{gguf.path}: the {family.name} family failed on this file's hyperparameters while {what} "
            f"({type(e).__name__}: {e}); its hyperparameters: {hparams_summary(gguf)}"
        ) from e


def load(
    source,
    device: str = "auto",
    threads: int | None = None,
    quiet: bool = False,
    manager: PluginManager | None = None,
    mmproj=None,
    **backend_options,
) -> LoadedModel:
    """Load a model from a path, a bundle name, a Hugging Face repo or a resolved
    `cera.sources.LocalModel` (see `cera.sources.resolve`). ``threads`` and other keywords
    are backend options (`Backend.options_type`). ``mmproj``: a multimodal projector file
    for images (`LoadedModel.load_projector`)."""
    local = sources.resolve(source, quiet=quiet)
    path = local.path
    gguf = GGUFFile(path)
    try:
        if gguf.metadata.get("general.architecture") == "clip":
            raise ModelConfigError(
                f"{path} is a multimodal projector (mmproj), not a text model: load the text model and give this "
                f"file as its mmproj (cera run -m MODEL --mmproj {path.name})"
            )
        manager = manager or get_manager()
        family, model, weights, ops = _read_model(gguf, manager)
        backend, notes = choose_backend(gguf, device, manager, model=model, ops=ops, threads=threads,
                                        **backend_options)  # fmt: skip
        try:
            uploaded = {name: backend.upload(gguf, name) for name in sorted(weights.used)}
        except BaseException:
            backend.close()
            raise
        loaded = LoadedModel(path, gguf, model, backend, family.name, notes, uploaded)
        loaded.companions = dict(local.companions)  # a bundle's other files by role (multimodal_projector, ...)
    except BaseException:
        gguf.close()
        raise
    if mmproj is not None:
        try:
            loaded.load_projector(mmproj)
        except BaseException:
            loaded.close()
            raise
    return loaded


__all__ = ["LoadedModel", "admission", "choose_backend", "load", "model_ops", "UnsupportedTensorType"]
