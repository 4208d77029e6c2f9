"""The two engines of bench_models.py behind one small interface.

Both engines answer `run(test, prefix, ids)` with a `Timing` of the timed part (wall
seconds, and the process's CPU seconds over the same span: how much of the requested
cores the engine got, which tells a busy machine apart), where the timed part is exactly
the same work on both:

- pp N (at depth D): the N ids evaluated as ONE batch after D context tokens; only the
  last position's logits are computed;
- tg N (at depth D): the N ids evaluated one at a time (a batch of one token, logits
  computed, as in decoding) after D context tokens.

The D context tokens are evaluated (untimed) once per test; before each timed run the
cache is cut back to them (cera: `Session.truncate`, llama.cpp: `llama_memory_seq_rm`),
so every run starts from the same D cached tokens. At depth 0 that is a cleared cache
(`Session.reset`, `llama_memory_clear`), as llama-bench does between repetitions.

llama.cpp runs on its own defaults through its C API (the llama-cpp-python bindings):
`llama_model_default_params()` and `llama_context_default_params()` with only the context
size, the batch sizes (so that a pp test is one batch) and the thread counts set. That
keeps flash attention on "auto", the KV cache in f16 and weight repacking on, which the
high-level `llama_cpp.Llama` class would change (it turns flash attention off).
"""

from __future__ import annotations

import ctypes
import os
import time
from dataclasses import dataclass

# llama.cpp's default logical and physical batch sizes (llama_context_default_params).
LLAMA_DEFAULT_N_BATCH = 2048
LLAMA_DEFAULT_N_UBATCH = 512


@dataclass(frozen=True)
class Timing:
    seconds: float  # wall time of the timed part
    cpu_seconds: float  # CPU time of the whole process (all threads) over the same span

    def cpu_share(self, threads: int) -> float:
        """CPU time per wall second per requested thread: about 1 when the engine had its
        cores (or spun on them), well below 1 when other work took them."""
        return self.cpu_seconds / (self.seconds * threads) if self.seconds > 0 else float("nan")


def _clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> Timing:
    wall, cpu = _clocks()
    return Timing(wall - start[0], cpu - start[1])


@dataclass(frozen=True)
class TestSpec:
    """One benchmark test: pp or tg, N timed tokens, D context tokens before them."""

    kind: str  # "pp" or "tg"
    n: int
    depth: int = 0

    @property
    def name(self) -> str:
        return f"{self.kind}{self.n}" + (f"@d{self.depth}" if self.depth else "")

    @property
    def n_ctx(self) -> int:
        """Context size both engines get: room for the depth and the timed tokens."""
        return self.depth + self.n

    @property
    def batch(self) -> int:
        """Largest batch the test evaluates at once (the depth prefix or the pp batch)."""
        return max(self.depth, self.n if self.kind == "pp" else 1, 1)


class CeraEngine:
    """cera through its public API: cera.load, new_session, append_tokens, evaluate."""

    name = "cera"

    def __init__(self, path: str, threads: int, device: str = "cpu"):
        import cera

        t0 = time.perf_counter()
        self.loaded = cera.load(path, device=device, threads=threads if device == "cpu" else None, quiet=True)
        self.load_seconds = time.perf_counter() - t0
        self.threads = threads
        self.n_vocab = int(self.loaded.model.n_vocab)
        self._session = None
        self._session_test: TestSpec | None = None

    def settings(self) -> dict:
        backend = self.loaded.backend
        return {
            "backend": backend.name,
            "device": backend.probe().device,
            "threads": self.threads,
            "kv_type": "f16",
            "n_batch": "max(test batch, 512)",
            "family": self.loaded.family,
            "architecture": self.loaded.architecture,
        }

    def _prepared_session(self, test: TestSpec, prefix: list[int]):
        """A session holding exactly the ``prefix`` tokens, reused across runs of a test."""
        if self._session_test != test:
            self._session = self.loaded.new_session(n_ctx=test.n_ctx, n_batch=max(test.batch, 512))
            self._session_test = test
        session = self._session
        if session.tokens[: len(prefix)] == prefix and len(session.tokens) >= len(prefix):
            session.truncate(len(prefix))
        else:
            session.reset()
            if prefix:
                session.append_tokens(prefix)
                session.evaluate()
        return session

    def run(self, test: TestSpec, prefix: list[int], ids: list[int]) -> Timing:
        session = self._prepared_session(test, prefix)
        if test.kind == "pp":
            session.append_tokens(ids)
            start = _clocks()
            session.evaluate()
            return _since(start)
        append, evaluate = session.append_tokens, session.evaluate
        start = _clocks()
        for token in ids:
            append((token,))
            evaluate()
        return _since(start)

    def logits_after(self, ids: list[int]):
        """The last position's logits after evaluating ``ids`` on a fresh context."""
        import numpy as np

        session = self.loaded.new_session(n_ctx=len(ids), n_batch=max(len(ids), 1))
        session.append_tokens(ids)
        return np.array(session.evaluate(), dtype=np.float32)

    def close(self) -> None:
        self._session = None
        self.loaded.close()


_llama_log: list[str] = []
_llama_initialised = False
_llama_log_callback = None  # kept referenced: llama.cpp holds the C function pointer


def _llama_init():
    """llama.cpp's backend, with its log captured (it tells what it resolved)."""
    global _llama_initialised, _llama_log_callback
    import llama_cpp as L

    if not _llama_initialised:

        @L.llama_log_callback
        def capture(level, text, user_data):  # noqa: ARG001 - ctypes callback signature
            _llama_log.append(text.decode("utf-8", errors="replace"))

        _llama_log_callback = capture
        L.llama_log_set(capture, ctypes.c_void_p(0))
        L.llama_backend_init()
        _llama_initialised = True
    return L


def _struct_record(params) -> dict:
    """The plain-valued fields of a ctypes params struct."""
    out = {}
    for name, _ in params._fields_:
        value = getattr(params, name)
        if isinstance(value, (bool, int, float)):
            out[name] = value
    return out


GGML_TYPE_NAMES = {0: "f32", 1: "f16", 8: "q8_0", 2: "q4_0", 30: "bf16"}
FLASH_ATTN_NAMES = {-1: "auto", 0: "disabled", 1: "enabled"}


class LlamaCppEngine:
    """llama.cpp through its C API, on its defaults (see the module docstring)."""

    name = "llama.cpp"

    def __init__(self, path: str, threads: int, gpu: bool = False):
        L = _llama_init()
        self.L = L
        self.threads = threads
        mparams = L.llama_model_default_params()
        if gpu:  # every layer offloaded to llama.cpp's GPU backend (llama-bench's -ngl 99)
            mparams.n_gpu_layers = 999
        self.model_params = _struct_record(mparams)
        _llama_log.clear()
        t0 = time.perf_counter()
        self.model = L.llama_model_load_from_file(str(path).encode(), mparams)
        self.load_seconds = time.perf_counter() - t0
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}:\n" + "".join(_llama_log[-20:]))
        self.load_log = "".join(_llama_log)
        self.n_vocab = int(L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model)))
        self.ctx = None
        self.batch = None
        self._ctx_key = None
        self.context_params: dict = {}
        self.context_log = ""
        self._n_past = 0
        self._tokens: list[int] = []

    def settings(self) -> dict:
        buffers = [ln.split(":", 1)[-1].strip() for ln in self.load_log.splitlines() if "model buffer size" in ln]
        cp = self.context_params
        return {
            "llama_cpp_python": self.L.__version__,
            "system_info": self.L.llama_print_system_info().decode().strip(),
            "threads": self.threads,
            "flash_attn": FLASH_ATTN_NAMES.get(cp.get("flash_attn_type"), cp.get("flash_attn_type")),
            "flash_attn_resolved": self.flash_attn_resolved(),
            "type_k": GGML_TYPE_NAMES.get(cp.get("type_k"), cp.get("type_k")),
            "type_v": GGML_TYPE_NAMES.get(cp.get("type_v"), cp.get("type_v")),
            "use_extra_bufts (repack)": self.model_params.get("use_extra_bufts"),
            "weight buffers": ", ".join(buffers) or "not reported",
            "n_batch": "max(test batch, 2048), clamped by llama.cpp to n_ctx",
            "n_ubatch": "max(test batch, 512), clamped likewise",
            "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "unset (libgomp default)"),
        }

    def params(self) -> dict:
        """Every plain field of the model and (last) context parameters, for the record."""
        return {"model": self.model_params, "context": self.context_params}

    def flash_attn_resolved(self) -> str:
        for line in self.context_log.splitlines():
            if "Flash Attention" in line or "flash_attn" in line:
                for word in ("enabled", "disabled"):
                    if word in line:
                        return word
        return "not reported"

    def _context_for(self, test: TestSpec):
        L = self.L
        n_batch = max(test.batch, LLAMA_DEFAULT_N_BATCH)
        n_ubatch = max(test.batch, LLAMA_DEFAULT_N_UBATCH)
        key = (test.n_ctx, n_batch, n_ubatch)
        if key == self._ctx_key:
            return
        self._free_context()
        cparams = L.llama_context_default_params()
        cparams.n_ctx = test.n_ctx
        cparams.n_batch = n_batch
        cparams.n_ubatch = n_ubatch
        cparams.n_threads = self.threads
        cparams.n_threads_batch = self.threads
        _llama_log.clear()
        self.ctx = L.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            raise RuntimeError("llama.cpp could not create a context:\n" + "".join(_llama_log[-20:]))
        self.context_log = "".join(_llama_log)
        self.context_params = _struct_record(cparams)
        self.context_params["n_ctx_actual"] = int(L.llama_n_ctx(self.ctx))
        self.batch = L.llama_batch_init(max(test.batch, 1), 0, 1)
        self._ctx_key = key
        self._tokens = []

    def _decode(self, ids: list[int]) -> None:
        """One llama_decode of ``ids`` at the next positions; logits for the last only."""
        L, b = self.L, self.batch
        start = len(self._tokens)
        b.n_tokens = len(ids)
        for i, token in enumerate(ids):
            b.token[i] = token
            b.pos[i] = start + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = i == len(ids) - 1
        rc = L.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        L.llama_synchronize(self.ctx)
        L.llama_get_logits_ith(self.ctx, -1)  # what a caller reads next; cera returns them too
        self._tokens.extend(ids)

    def _prepare(self, test: TestSpec, prefix: list[int]) -> None:
        self._context_for(test)
        mem = self.L.llama_get_memory(self.ctx)
        if self._tokens[: len(prefix)] == prefix and len(self._tokens) >= len(prefix):
            if len(self._tokens) > len(prefix):
                if not self.L.llama_memory_seq_rm(mem, 0, len(prefix), -1):
                    raise RuntimeError("llama_memory_seq_rm could not cut the cache back")
                del self._tokens[len(prefix) :]
            return
        self.L.llama_memory_clear(mem, True)
        self._tokens = []
        if prefix:
            self._decode(prefix)

    def run(self, test: TestSpec, prefix: list[int], ids: list[int]) -> Timing:
        self._prepare(test, prefix)
        if test.kind == "pp":
            start = _clocks()
            self._decode(ids)
            return _since(start)
        decode = self._decode
        start = _clocks()
        for token in ids:
            decode([token])
        return _since(start)

    def logits_after(self, ids: list[int]):
        """The last position's logits after evaluating ``ids`` on a fresh context."""
        import numpy as np

        self._prepare(TestSpec("pp", len(ids)), [])
        self._decode(ids)
        ptr = self.L.llama_get_logits_ith(self.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()

    def _free_context(self) -> None:
        if self.batch is not None:
            self.L.llama_batch_free(self.batch)
            self.batch = None
        if self.ctx:
            self.L.llama_free(self.ctx)
            self.ctx = None
        self._ctx_key = None

    def close(self) -> None:
        self._free_context()
        if self.model:
            self.L.llama_model_free(self.model)
            self.model = None
