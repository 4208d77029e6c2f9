"""Where do cera and llama.cpp part ways? Compare their intermediate tensors layer by layer.

A diagnostic for fidelity work, not a test. llama.cpp's tensors come from its
graph-evaluation callback (``cb_eval``: every named node of the graph, read as it is
computed); cera's from a wrapper that copies the result of every backend op while the
model's forward pass runs eagerly (no recorded plans). Both evaluate a reference case the
way the stored reference was made: the prompt as one batch, then the continuation token
by token. For each evaluation the script prints, per layer, the largest absolute
difference of a few anchor tensors and whether they are bit-identical, so the first op
whose results differ stands out.

    python tests/models/reference/layer_diff.py gemma3-270m-q4_k_m num_primes --steps 10

Needs llama-cpp-python (as built for the reference, see README.md). The cera side maps
its ops to llama.cpp's tensor names by the op order of the decoder layers in
cera.blocks.layers (norm, q/k/v, q/k norm, rope, attention, out, post norms, adds), which fits
the llama, qwen and gemma families; other families may need their own map.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import llama_cpp as L  # noqa: E402
from fidelity import load_reference, model_source  # noqa: E402
from llamacpp_driver import ContextSettings, LlamaCppModel  # noqa: E402

GGML_MAX_DIMS, GGML_MAX_SRC, GGML_MAX_NAME, GGML_MAX_OP_PARAMS = 4, 10, 64, 64


class GgmlTensor(ctypes.Structure):
    """struct ggml_tensor of the ggml vendored in llama-cpp-python 0.3.36 (ggml.h)."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * GGML_MAX_DIMS),
        ("nb", ctypes.c_size_t * GGML_MAX_DIMS),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * (GGML_MAX_OP_PARAMS // 4)),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * GGML_MAX_SRC),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * GGML_MAX_NAME),
        ("extra", ctypes.c_void_p),
        ("padding", ctypes.c_char * 8),
    ]


_DTYPES = {0: np.float32, 1: np.float16}


class LlamaCppTaps:
    """Collects llama.cpp's named graph tensors (f32/f16) during llama_decode calls."""

    def __init__(self):
        self.tensors: dict[str, list[np.ndarray]] = defaultdict(list)

        @L.ggml_backend_sched_eval_callback
        def callback(t, ask, user_data):  # noqa: ARG001 - ctypes signature
            tensor = ctypes.cast(t, ctypes.POINTER(GgmlTensor)).contents
            if tensor.type not in _DTYPES:
                return False
            if ask:
                return True
            self.tensors[tensor.name.decode()].append(self._read(tensor))
            return True

        self.callback = callback  # keep the ctypes object alive

    @staticmethod
    def _read(t: GgmlTensor) -> np.ndarray:
        dtype = np.dtype(_DTYPES[t.type])
        ne = [t.ne[i] for i in range(GGML_MAX_DIMS)]
        nb = [t.nb[i] for i in range(GGML_MAX_DIMS)]
        span = sum((n - 1) * s for n, s in zip(ne, nb, strict=True)) + dtype.itemsize
        raw = np.ctypeslib.as_array((ctypes.c_uint8 * span).from_address(t.data)).view(dtype)
        arr = np.lib.stride_tricks.as_strided(raw, shape=tuple(reversed(ne)), strides=tuple(reversed(nb)))
        return np.array(arr, dtype=np.float32)  # copy: the buffer is reused

    def take(self) -> dict[str, list[np.ndarray]]:
        out, self.tensors = self.tensors, defaultdict(list)
        return out


class LlamaCppTapped(LlamaCppModel):
    def __init__(self, path, settings, taps: LlamaCppTaps):
        self._taps = taps
        original = L.llama_init_from_model

        def init(model, cparams):
            cparams.cb_eval = taps.callback
            cparams.cb_eval_user_data = None
            return original(model, cparams)

        L.llama_init_from_model = init
        try:
            super().__init__(path, settings)
        finally:
            L.llama_init_from_model = original


class CeraTaps:
    """Copies the output of every op of a cera backend, in call order."""

    OPS = ("embedding", "scale", "linear", "rms_norm", "rope", "attention", "glu", "add", "softcap")

    def __init__(self, backend):
        self.calls: list[tuple[str, np.ndarray]] = []
        backend.use_plans = False
        for name in self.OPS:
            original = getattr(backend, name)

            def tapped(*args, _original=original, _name=name, **kw):
                out = _original(*args, **kw)
                self.calls.append((_name, np.array(out, dtype=np.float32)))
                return out

            setattr(backend, name, tapped)

    def take(self) -> list[tuple[str, np.ndarray]]:
        out, self.calls = self.calls, []
        return out


# cera ops of one decoder layer, in order, and the llama.cpp tensor each matches.
# (op, index of that op within the layer) -> llama.cpp name (+ occurrence of that name).
# Gemma's layer (sandwich norms, QK-norm, GeGLU):
GEMMA_LAYER_MAP = {
    ("rms_norm", 0): ("attn_norm", 0),
    ("linear", 0): ("Qcur", 0),
    ("linear", 1): ("Kcur", 0),
    ("linear", 2): ("Vcur", 0),
    ("rms_norm", 1): ("Qcur_normed", 0),
    ("rms_norm", 2): ("Kcur_normed", 0),
    ("rope", 0): ("Qcur", 2),  # occurrences: projection, its reshape, roped
    ("rope", 1): ("Kcur", 2),
    ("attention", 0): ("kqv_out", 0),
    ("rms_norm", 3): ("attn_post_norm", 0),
    ("add", 0): ("sa_out", 0),
    ("rms_norm", 4): ("ffn_norm", 0),
    ("linear", 4): ("ffn_gate", 0),
    ("linear", 5): ("ffn_up", 0),
    ("glu", 0): ("ffn_geglu", 0),
    ("linear", 6): ("ffn_out", 0),
    ("rms_norm", 5): ("ffn_post_norm", 0),
    ("add", 1): ("l_out", 0),
}
# llama / qwen2 (pre-norms only, SwiGLU):
LLAMA_LAYER_MAP = {
    ("rms_norm", 0): ("attn_norm", 0),
    ("linear", 0): ("Qcur", 0),
    ("linear", 1): ("Kcur", 0),
    ("linear", 2): ("Vcur", 0),
    ("rope", 0): ("Qcur", 2),
    ("rope", 1): ("Kcur", 2),
    ("attention", 0): ("kqv_out", 0),
    ("add", 0): ("ffn_inp", 0),
    ("rms_norm", 1): ("ffn_norm", 0),
    ("linear", 4): ("ffn_gate", 0),
    ("linear", 5): ("ffn_up", 0),
    ("glu", 0): ("ffn_swiglu", 0),
    ("linear", 6): ("ffn_out", 0),
    ("add", 1): ("l_out", 0),
}


def layer_map(layer_calls) -> dict:
    norms = sum(1 for name, _ in layer_calls if name == "rms_norm")
    return GEMMA_LAYER_MAP if norms >= 6 else LLAMA_LAYER_MAP


def split_layers(calls):
    """Cut cera's op stream into layers: each layer ends with its second add."""
    layers, current, adds = [], [], 0
    head = []
    for name, out in calls:
        if not layers and not current and name in ("embedding", "scale"):
            head.append((name, out))
            continue
        current.append((name, out))
        if name == "add":
            adds += 1
            if adds == 2:
                layers.append(current)
                current, adds = [], 0
    return head, layers, current


def compare(ref: np.ndarray, mine: np.ndarray) -> str:
    a = ref.reshape(-1, ref.shape[-1]) if ref.ndim > 1 else ref[None]
    b = mine.reshape(a.shape[0], -1) if mine.size == a.size else None
    if b is None:
        # llama.cpp keeps only the output rows in the last layer
        rows = a.shape[0]
        b = mine.reshape(-1, a.shape[-1])[-rows:]
    diff = np.abs(a - b)
    same = "identical" if np.array_equal(a, b) else f"{int((a != b).sum())}/{a.size} differ"
    return f"max|d| {diff.max():.3g} ({same})"


def report(tensors, calls, names_of_interest):
    head, layers, tail = split_layers(calls)
    for li, layer in enumerate(layers):
        counters: dict[str, int] = defaultdict(int)
        lines = []
        mapping = layer_map(layer)
        for name, out in layer:
            key = (name, counters[name])
            counters[name] += 1
            if key not in mapping:
                continue
            ref_name, occurrence = mapping[key]
            # with q/k/v biases (qwen2) llama.cpp names the biased projection once more
            if ref_name in ("Qcur", "Kcur", "Vcur") and len(tensors.get(f"{ref_name}-{li}", [])) > 3 - (
                ref_name == "Vcur"
            ):
                occurrence += 1
            if names_of_interest and ref_name not in names_of_interest:
                continue
            found = tensors.get(f"{ref_name}-{li}", [])
            if len(found) <= occurrence:
                continue
            ref = found[occurrence]
            if ref.size != out.size and ref.shape[-1] != out.reshape(-1)[: ref.shape[-1]].size:
                lines.append(f"    {ref_name}: shapes {ref.shape} vs {out.shape}")
                continue
            lines.append(f"    {ref_name:15s} {compare(ref, out)}")
        print(f"  layer {li}")
        print("\n".join(lines))


def main(argv=None):
    import cera

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("reference", help="reference data name (tests/models/reference/data/NAME.json)")
    p.add_argument("case", help="case id in it")
    p.add_argument("--steps", type=int, default=0, help="continuation steps to compare after the prompt")
    p.add_argument("--only", default="", help="comma-separated llama.cpp tensor names to show")
    p.add_argument("--layers", type=int, default=None, help="show only the first N layers")
    args = p.parse_args(argv)

    record = load_reference(args.reference)
    case = next(c for c in record["cases"] if c["id"] == args.case)
    source = model_source(record)
    loaded = cera.load(source, device="cpu", threads=2)
    taps_c = CeraTaps(loaded.backend)
    path = loaded.path
    taps_l = LlamaCppTaps()
    settings = ContextSettings(n_ctx=1024, n_threads=2)
    lm = LlamaCppTapped(str(path), settings, taps_l)

    prompt = case["prompt_tokens"]
    cont = [s["token"] for s in case["steps"]][: args.steps]
    session = loaded.new_session(n_ctx=max(1024, len(prompt) + len(cont) + 8), n_batch=max(len(prompt), 1))
    only = {s for s in args.only.split(",") if s}

    evals = [prompt] + [[t] for t in cont]
    for i, toks in enumerate(evals):
        lm.eval(toks)
        session.append_tokens(toks)
        session.evaluate()
        tensors, calls = taps_l.take(), taps_c.take()
        label = f"prompt ({len(toks)} tokens)" if i == 0 else f"step {i} (token {toks[0]})"
        print(f"== {label}")
        if args.layers is not None:
            head, layers, tail = split_layers(calls)
            calls = head + [c for layer in layers[: args.layers] for c in layer]
        report(tensors, calls, only)
        out = tensors.get("result_output", [])
        mine = [o for _, o in calls if o.shape[-1] == out[-1].shape[-1]] if out else []
        if mine:
            print(f"  logits {compare(out[-1][-1:], mine[-1].reshape(-1, mine[-1].shape[-1])[-1:])}")


if __name__ == "__main__":
    main()
