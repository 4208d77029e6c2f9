"""A thin driver over llama.cpp's C API (through llama-cpp-python's ctypes bindings).

Why not ``llama_cpp.Llama``: its constructor turns flash attention off unless asked
(``flash_attn=False`` maps to LLAMA_FLASH_ATTN_TYPE_DISABLED), while llama.cpp's own
default, and so llama-cli's, is "auto". It also hides which positions of a batch get
logits. Here the context starts from ``llama_context_default_params()`` and only the
settings named in ``ContextSettings`` are changed, so the reference is what llama.cpp
does by default, and every batch is built by hand.
"""

from __future__ import annotations

import ctypes
import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path

import llama_cpp as L
import numpy as np

FLASH_ATTN_NAMES = {
    L.LLAMA_FLASH_ATTN_TYPE_AUTO: "auto",
    L.LLAMA_FLASH_ATTN_TYPE_DISABLED: "disabled",
    L.LLAMA_FLASH_ATTN_TYPE_ENABLED: "enabled",
}

_log_lines: list[str] = []


@L.llama_log_callback
def _capture_log(level, text, user_data):  # noqa: ARG001 - ctypes callback signature
    _log_lines.append(text.decode("utf-8", errors="replace"))


_initialised = False


def _init_backend() -> None:
    global _initialised
    if not _initialised:
        L.llama_log_set(_capture_log, ctypes.c_void_p(0))
        L.llama_backend_init()
        _initialised = True


def sha256_of(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class ContextSettings:
    n_ctx: int = 1024
    n_threads: int = 2
    flash_attn: str = "auto"  # llama.cpp's default
    use_extra_bufts: bool = False  # llama.cpp's default is True; see LlamaCppModel
    type_k: str = "f16"  # the KV cache types (llama.cpp's -ctk / -ctv): f16, f32, q8_0, q4_0
    type_v: str = "f16"

    def as_record(self) -> dict:
        return asdict(self)


class LlamaCppModel:
    """One GGUF file loaded in llama.cpp, with one context (sequence 0)."""

    def __init__(self, path: str | Path, settings: ContextSettings):
        _init_backend()
        self.path = str(path)
        self.settings = settings
        mparams = L.llama_model_default_params()
        # Extra buffer types (weight repacking, and AMX on CPUs that have it) stay off:
        # on this project's machines (Xeon with AMX) llama.cpp's AMX matmul crashes with a
        # general protection fault in ggml_backend_amx_mul_mat on every file tried. This
        # is llama-cli's --no-repack; the plain ggml-cpu kernels run instead.
        mparams.use_extra_bufts = settings.use_extra_bufts
        self.model_params = {
            name: getattr(mparams, name)
            for name, _ in mparams._fields_
            if isinstance(getattr(mparams, name), (int, float, bool))
        }
        self.model = L.llama_model_load_from_file(self.path.encode(), mparams)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {self.path}")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)

        cparams = L.llama_context_default_params()
        self.default_context_params = {
            name: getattr(cparams, name)
            for name, _ in cparams._fields_
            if isinstance(getattr(cparams, name), (int, float, bool))
        }
        # n_batch = n_ubatch = n_ctx: every prompt that fits the context is one physical
        # batch, so "the prompt evaluated as one batch" means exactly that.
        cparams.n_ctx = settings.n_ctx
        cparams.n_batch = settings.n_ctx
        cparams.n_ubatch = settings.n_ctx
        cparams.n_threads = settings.n_threads
        cparams.n_threads_batch = settings.n_threads
        cparams.flash_attn_type = {v: k for k, v in FLASH_ATTN_NAMES.items()}[settings.flash_attn]
        cparams.type_k = getattr(L, f"GGML_TYPE_{settings.type_k.upper()}")
        cparams.type_v = getattr(L, f"GGML_TYPE_{settings.type_v.upper()}")
        _log_lines.clear()
        self.ctx = L.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            raise RuntimeError(f"llama.cpp could not create a context for {self.path}")
        self.context_log = "".join(_log_lines)
        self.context_params = {
            name: getattr(cparams, name)
            for name, _ in cparams._fields_
            if isinstance(getattr(cparams, name), (int, float, bool))
        }
        self.batch = L.llama_batch_init(settings.n_ctx, 0, 1)
        self.n_past = 0

    # -- facts about the file -------------------------------------------------------

    def flash_attn_resolved(self) -> str:
        """What llama.cpp decided for flash attention, read off its log."""
        for line in self.context_log.splitlines():
            if "Flash Attention" in line:
                if "enabled" in line:
                    return "enabled"
                if "disabled" in line:
                    return "disabled"
        return self.settings.flash_attn

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1 << 16)
        n = L.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace") if n >= 0 else None

    def chat_template(self) -> str | None:
        raw = L.llama_model_chat_template(self.model, None)
        return raw.decode("utf-8") if raw else None

    def is_eog(self, token: int) -> bool:
        return bool(L.llama_vocab_is_eog(self.vocab, token))

    def eog_tokens(self) -> list[int]:
        return [t for t in range(self.n_vocab) if self.is_eog(t)]

    def special_ids(self) -> dict:
        names = ["bos", "eos", "eot", "sep", "nl", "pad"]
        return {n: int(getattr(L, f"llama_vocab_{n}")(self.vocab)) for n in names}

    def token_text(self, token: int) -> str:
        raw = L.llama_vocab_get_text(self.vocab, token)
        return raw.decode("utf-8", errors="replace") if raw else ""

    # -- text <-> tokens ------------------------------------------------------------

    def tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        data = text.encode("utf-8")
        room = len(data) + 16
        out = (L.llama_token * room)()
        n = L.llama_tokenize(self.vocab, data, len(data), out, room, add_special, parse_special)
        if n < 0:
            raise RuntimeError(f"tokenize needs {-n} tokens")
        return list(out[:n])

    def piece(self, token: int, special: bool = True) -> bytes:
        buf = ctypes.create_string_buffer(256)
        n = L.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    def detokenize(self, tokens: list[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", errors="replace")

    def apply_chat_template(self, messages: list[dict], template: str | None) -> str:
        """llama.cpp's built-in template support (llama_chat_apply_template).

        ``template`` is a template text (matched by llama.cpp against its known
        templates) or the name of a built-in template such as "gemma"."""
        tmpl = template if template is not None else self.chat_template()
        if tmpl is None:
            raise RuntimeError("no chat template")
        keep = [(m["role"].encode(), m["content"].encode()) for m in messages]
        chat = (L.llama_chat_message * len(keep))()
        for i, (role, content) in enumerate(keep):
            chat[i].role = role
            chat[i].content = content
        size = 1 << 16
        buf = ctypes.create_string_buffer(size)
        n = L.llama_chat_apply_template(tmpl.encode(), chat, len(keep), True, buf, size)
        if n < 0:
            raise RuntimeError("llama.cpp does not know this chat template")
        return buf.raw[:n].decode("utf-8")

    # -- evaluation -----------------------------------------------------------------

    def reset(self) -> None:
        L.llama_memory_clear(L.llama_get_memory(self.ctx), True)
        self.n_past = 0

    def eval(self, tokens: list[int], all_logits: bool = False) -> np.ndarray:
        """Decode ``tokens`` as ONE batch at the next positions of sequence 0.

        Returns the logits of the last token (shape [n_vocab]) or, with
        ``all_logits``, of every token (shape [len(tokens), n_vocab])."""
        n = len(tokens)
        if not 0 < n <= self.settings.n_ctx or self.n_past + n > self.settings.n_ctx:
            raise ValueError(f"batch of {n} at position {self.n_past} does not fit n_ctx")
        b = self.batch
        b.n_tokens = n
        for i, tok in enumerate(tokens):
            b.token[i] = tok
            b.pos[i] = self.n_past + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = all_logits or i == n - 1
        rc = L.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        self.n_past += n
        if all_logits:
            rows = [self._logits_row(i) for i in range(n)]
            return np.stack(rows)
        return self._logits_row(-1)

    def _logits_row(self, i: int) -> np.ndarray:
        ptr = L.llama_get_logits_ith(self.ctx, i)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()

    def close(self) -> None:
        L.llama_batch_free(self.batch)
        L.llama_free(self.ctx)
        L.llama_model_free(self.model)


def greedy_steps(path, record: dict, steps: int, cases: int | None = None) -> dict:
    """llama.cpp's greedy continuation of each stored case, computed now, loaded with the
    record's settings: {case id: [(token, top-1 logit, top-2 margin), ...]}, at most `steps`
    per case (never more than the record stores), for the first `cases` cases (all: None)."""
    s = record["settings"]
    model = LlamaCppModel(path, ContextSettings(n_ctx=s["n_ctx"], n_threads=s["n_threads"]))
    out = {}
    try:
        for case in record["cases"][:cases]:
            model.reset()
            logits = model.eval(case["prompt_tokens"])
            taken = []
            for _ in range(min(steps, len(case["steps"]))):
                order = np.argsort(-logits, kind="stable")[:2]
                taken.append((int(order[0]), float(logits[order[0]]), float(logits[order[0]] - logits[order[1]])))
                logits = model.eval([int(order[0])])
            out[case["id"]] = taken
    finally:
        model.close()
    return out


def llama_cpp_facts() -> dict:
    """Which llama.cpp build produced the numbers (kernels differ between builds and CPUs)."""
    _init_backend()
    lib_dir = Path(L.__file__).parent / "lib"
    return {
        "llama_cpp_python": L.__version__,
        "system_info": L.llama_print_system_info().decode(),
        "libraries_sha256": {p.name: sha256_of(p) for p in sorted(lib_dir.glob("*.so.*.*.*"))},
    }
