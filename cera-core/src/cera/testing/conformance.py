"""The conformance suite: any backend, op by op and model by model, against the reference.

ggml's `test-backend-ops` is the model. Each `OpCase` builds a small graph around one op
(with weights of a given GGUF type, state where the op has some, a batch layout, several
passes where state carries over), runs it on the backend under test and on the numpy
reference backend (`cera.testing.reference`), and compares every output. A backend's
tests run it like this (see tests/backend_cpu/test_conformance.py)::

    from cera.testing import conformance

    @pytest.mark.parametrize("case", conformance.op_cases(MyBackend().tensor_types), ids=str)
    def test_op(case):
        conformance.check_op(MyBackend(), case)

    def test_model():
        conformance.check_model(MyBackend(), "tiny.gguf")

Weights reach both backends the way real ones do: written to a GGUF file (quantized by
the `gguf` package, or random valid blocks for types it cannot quantize) and uploaded by
name. Cases whose weight type or op the backend does not serve are skipped by
`op_cases(types, ops)`.

Tolerances (``case.tolerance``): ``max |got - want| <= tolerance * max(1, max |want|)``.
They are per kind, stated where the cases are made:

- float ops on float32 data (norms, rope, elementwise, softmax, reshapes): 1e-5, float32
  rounding of short sums and libm/SIMD transcendental functions (a few ulp);
- activations through f16 tables (gelu, as ggml does): 2e-3 (f16 has an 11-bit mantissa);
- products with F32 weights: 1e-5; F16 / BF16 weights: 4e-3 / 2e-2 (activations are rounded
  to the weight's type, as llama.cpp's vec_dot_type); quantized weights: 3e-2 (activations
  quantized to 8 bits per block: relative error 1/254 per element, summed over the row);
- attention over an f16 cache with an f16 value accumulator: 1e-2; over an f32 cache: 1e-4;
  over a q8_0 cache: 3e-2 (keys, values and, for the key dot products, the query are
  quantized to 8 bits per block of 32; the two backends' quantizers may round a value
  differently by one step);
- argmax / top_k ids: exact where the reference's best values are at least 1e-3 apart
  (random data makes ties unlikely; the cases check the gap).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from pathlib import Path

import attrs
import numpy as np

from ..backend import StepInputs
from ..graph.builder import GraphBuilder, Layout, Outputs, WeightRef
from ..graph.ops import AttentionSpec, RopeSpec
from ..state import AttentionKV, CrossKV, ShortConv, SSMState, StateSpec

FLOAT_TYPES = ("F32", "F16", "BF16")
QUANT_TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
GGUF_CAN_QUANTIZE = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "BF16", "F16")
# f16 scale fields of each block type (byte offsets), so random blocks stay finite
F16_FIELDS = {
    "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,), "IQ4_NL": (0,),
    "Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,),
}  # fmt: skip

TOL_FLOAT = 1e-5
TOL_F16_TABLE = 2e-3
TOL_WEIGHT = {"F32": 1e-5, "F16": 4e-3, "BF16": 2e-2}
TOL_QUANT = 3e-2


@attrs.frozen
class WeightSpec:
    name: str
    numpy_shape: tuple[int, ...]
    ggml_type: str = "F32"
    scale: float = 0.3


@attrs.frozen
class OpCase:
    """One conformance case: ``build(g, w, s)`` adds the op (``w``: WeightRefs by name,
    ``s``: StateRefs) and declares outputs with ``g.output``; ``passes`` layouts run in
    turn on one state; ``tolerance`` as in the module docstring."""

    name: str
    op: str
    build: Callable
    weights: tuple[WeightSpec, ...] = ()
    state: tuple = ()
    passes: tuple[tuple[int, ...], ...] = ((5,),)
    tolerance: float = TOL_FLOAT
    kv_type: str = "f32"
    # TurboQuant: the attention caches keep their keys less a large fixed offset per head
    # (`cera.state.check_key_offsets`); a backend that ignored it would quantize the offset too
    key_offset: float = 0.0
    inputs: Callable | None = None  # (rng, layout) -> {name: array} for declared inputs
    ids_gap: float = 0.0  # for argmax / top_k: required gap between the reference's values
    n_ctx: int = 128  # the state's context (cells per slot)

    def __str__(self) -> str:
        return self.name

    @property
    def types(self) -> set[str]:
        return {w.ggml_type for w in self.weights}

    @property
    def ops(self) -> set[str]:
        return {self.op}


# -- weights through a GGUF file -------------------------------------------------------------


def _random_blocks(t: str, rows: int, k: int, rng) -> np.ndarray:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    bs, ts = GGML_QUANT_SIZES[GGMLQuantizationType[t]]
    raw = rng.integers(0, 256, (rows, k // bs, ts), dtype=np.uint8)
    for off in F16_FIELDS[t]:
        vals = rng.uniform(0.001, 0.01, raw.shape[:2]) * rng.choice([-1.0, 1.0], raw.shape[:2])
        raw[..., off : off + 2] = vals.astype(np.float16).view(np.uint8).reshape(raw.shape[:2] + (2,))
    return raw.reshape(rows, -1)


def write_weights(path: Path, specs, rng) -> None:
    """A GGUF file holding ``specs`` as tensors of their types."""
    from gguf import GGMLQuantizationType, GGUFWriter
    from gguf.quants import quantize

    w = GGUFWriter(str(path), "cera-conformance")
    for s in specs:
        values = (rng.standard_normal(s.numpy_shape) * s.scale).astype(np.float32)
        if s.ggml_type == "F32":
            w.add_tensor(s.name, values)
        elif s.ggml_type in GGUF_CAN_QUANTIZE:
            qt = GGMLQuantizationType[s.ggml_type]
            data = quantize(values, qt)
            w.add_tensor(s.name, data, raw_shape=data.shape, raw_dtype=qt)
        else:
            rows = math.prod(s.numpy_shape[:-1])
            data = _random_blocks(s.ggml_type, rows, s.numpy_shape[-1], rng)
            data = data.reshape(s.numpy_shape[:-1] + (data.shape[-1],))
            w.add_tensor(s.name, data, raw_shape=data.shape, raw_dtype=GGMLQuantizationType[s.ggml_type])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# -- running a case ----------------------------------------------------------------------------


def _graph(case: OpCase, layout: Layout, refs: dict, srefs: list):
    g = GraphBuilder(layout, Outputs())
    case.build(g, refs, srefs)
    return g.finish()


def _inputs(case: OpCase, layout: Layout, rng, start: list[int], slots) -> StepInputs:
    positions = np.concatenate([np.arange(start[s], start[s] + n) for s, n in enumerate(layout.seq_lens)]).astype(np.int32)
    tokens = rng.integers(0, 16, layout.n_tokens).astype(np.int32)
    extra = case.inputs(rng, layout) if case.inputs else {}
    return StepInputs(tokens, positions, np.asarray(slots, np.int32), np.asarray(start, np.int32), extra)


def check_op(backend, case: OpCase, seed: int = 0, ref=None) -> list:
    """Run ``case`` on ``backend`` and on the reference (``ref``: another backend to compare
    with instead); raise AssertionError on a mismatch. Returns the two states (the
    backend's, the reference's) after the last pass."""
    from ..formats.gguf import GGUFFile
    from .reference import ReferenceBackend

    rng = np.random.default_rng(seed)
    ref = ref if ref is not None else ReferenceBackend()
    with tempfile.TemporaryDirectory(prefix="cera-conformance-") as tmp:
        path = Path(tmp) / "weights.gguf"
        write_weights(path, case.weights, rng)
        with GGUFFile(path) as gguf:
            refs = {name: WeightRef(name, info.type_name, info.shape) for name, info in gguf.tensors.items()}
            got_w = {n: backend.upload(gguf, n) for n in refs}
            want_w = {n: ref.upload(gguf, n) for n in refs}
            spec = StateSpec()
            srefs = [spec.add(d) for d in case.state]
            n_seq = max(len(p) for p in case.passes)
            n_ctx = case.n_ctx
            n_batch = max(max(p) for p in case.passes)  # small batches: sliding windows become rings
            extra = {}
            if case.key_offset:
                extra["key_offsets"] = {
                    r.index: case.key_offset * np.random.default_rng(seed + r.index).standard_normal(
                        (d.n_kv_heads, d.k_dim)).astype(np.float32)
                    for r, d in zip(srefs, case.state, strict=True) if d.kind == "kv"
                }  # fmt: skip
            states = [
                b.new_state(spec, n_ctx, n_slots=n_seq, kv_type=case.kv_type, n_batch=n_batch, **extra)
                for b in (backend, ref)
            ]
            filled = [0] * n_seq
            for i, seq_lens in enumerate(case.passes):
                layout = Layout(seq_lens)
                graph = _graph(case, layout, refs, srefs)
                slots = list(range(len(seq_lens)))
                inputs = _inputs(case, layout, rng, [filled[s] for s in slots], slots)
                outs = []
                for b, st, w in ((backend, states[0], got_w), (ref, states[1], want_w)):
                    exe = b.compile(graph, w, st)
                    for s, n in zip(slots, seq_lens, strict=True):
                        st.begin(s, inputs.positions[layout.groups[s][0] : layout.groups[s][0] + n])
                    outs.append(exe.run(st, inputs))
                    for s in slots:
                        st.commit(s)
                for s, n in zip(slots, seq_lens, strict=True):
                    filled[s] += n
                _compare(case, i, outs[0], outs[1])
    return states


def _compare(case: OpCase, i: int, got: dict, want: dict) -> None:
    assert set(got) == set(want), f"{case}: outputs {sorted(got)} != {sorted(want)}"
    for name in want:
        a, b = np.asarray(got[name]), np.asarray(want[name])
        assert a.shape == b.shape, f"{case} pass {i}: output {name!r} has shape {a.shape}, the reference {b.shape}"
        if b.dtype.kind in "iu":
            assert np.array_equal(a, b), f"{case} pass {i}: output {name!r} ids {a.ravel()[:8]} != {b.ravel()[:8]}"
            continue
        scale = max(1.0, float(np.abs(b).max()) if b.size else 1.0)
        err = float(np.abs(a.astype(np.float64) - b).max()) if b.size else 0.0
        assert np.all(np.isfinite(a)), f"{case} pass {i}: output {name!r} has non-finite values"
        assert err <= case.tolerance * scale, (
            f"{case} pass {i}: output {name!r} differs from the reference by {err:.3g} "
            f"(tolerance {case.tolerance} x {scale:.3g})"
        )


# -- the cases ----------------------------------------------------------------------------------


def _x(g: GraphBuilder, dim: int, name: str = "x"):
    return g.embedding(WeightRef(name, "F32", (dim, 16)), g.tokens)


def _emb(dim: int, name: str = "x") -> WeightSpec:
    return WeightSpec(name, (16, dim), "F32", 1.0)


def op_cases(types=None, ops=None) -> list[OpCase]:
    """Every case, or those whose weight types are in ``types`` and op is in ``ops``."""
    cases = _all_cases()
    if types is not None:
        cases = [c for c in cases if c.types <= set(types)]
    if ops is not None:
        cases = [c for c in cases if c.op in set(ops) and "embedding" in set(ops)]
    return cases


def _all_cases() -> list[OpCase]:
    cases: list[OpCase] = []
    add = cases.append

    # embedding of every type (rows of 256: every block size fits)
    for t in FLOAT_TYPES + QUANT_TYPES:
        add(OpCase(f"embedding[{t}]", "embedding", lambda g, w, s: g.output("y", g.embedding(w["t"], g.tokens)),
                   (WeightSpec("t", (16, 256), t, 0.5),), tolerance=TOL_FLOAT))  # fmt: skip

    # products of every type: one row, a few rows, many rows (prompt kernels), a decode batch
    for t in FLOAT_TYPES + QUANT_TYPES:
        tol = TOL_WEIGHT.get(t, TOL_QUANT)
        for seq_lens in ((1,), (5,), (20,), (1, 1, 1)):
            def build(g, w, s):
                g.output("y", g.linear(_x(g, 256), w["w"], w.get("b")))

            add(OpCase(f"linear[{t},{'x'.join(map(str, seq_lens))}]", "linear", build,
                       (_emb(256), WeightSpec("w", (40, 256), t), WeightSpec("b", (40,), "F32")),
                       passes=(seq_lens,), tolerance=tol))  # fmt: skip

    def norm_cases():
        def rms(g, w, s):
            x = _x(g, 48)
            g.output("y", g.rms_norm(x, w["n"], 1e-5))
            g.output("z", g.rms_norm(g.reshape(x, (x.shape[0], 3, 16)), None, 1e-6))

        def ln(g, w, s):
            g.output("y", g.layer_norm(_x(g, 48), w["n"], w["b"], 1e-5))
            g.output("z", g.layer_norm(_x(g, 48), None, None, 1e-5))

        add(OpCase("rms_norm", "rms_norm", rms, (_emb(48), WeightSpec("n", (48,)))))
        add(OpCase("layer_norm", "layer_norm", ln, (_emb(48), WeightSpec("n", (48,)), WeightSpec("b", (48,)))))

    norm_cases()

    for label, spec in (
        ("normal", RopeSpec(n_dims=16)),
        ("neox_partial", RopeSpec(n_dims=8, neox=True, base=500.0)),
        ("yarn", RopeSpec(n_dims=16, neox=True, freq_scale=0.25, ext_factor=1.0, attn_factor=0.9, n_ctx_orig=32)),
        ("freq_factors", RopeSpec(n_dims=16, freq_factors=tuple(1.0 + 0.5 * i for i in range(8)))),
    ):
        def build(g, w, s, spec=spec):
            x = g.reshape(_x(g, 64), (g.layout.n_tokens, 4, 16))
            g.output("y", g.rope(x, g.positions, spec))

        add(OpCase(f"rope[{label}]", "rope", build, (_emb(64),), passes=((7,), (2,))))

    for kind in ("silu", "gelu", "gelu_erf", "relu", "sigmoid", "softplus"):
        add(OpCase(f"unary[{kind}]", "unary", lambda g, w, s, k=kind: g.output("y", g.unary(k, _x(g, 64))),
                   (_emb(64),), tolerance=TOL_F16_TABLE if kind == "gelu" else TOL_FLOAT))  # fmt: skip
    for kind in ("swiglu", "geglu"):
        add(OpCase(f"glu[{kind}]", "glu", lambda g, w, s, k=kind: g.output("y", g.glu(k, _x(g, 64), _x(g, 64, "u"))),
                   (_emb(64), _emb(64, "u")), tolerance=TOL_F16_TABLE if kind == "geglu" else TOL_FLOAT))  # fmt: skip
    for op in ("add", "mul"):
        def build(g, w, s, op=op):
            x = _x(g, 32)
            g.output("t", getattr(g, op)(x, _x(g, 32, "u")))
            g.output("w", getattr(g, op)(x, w["b"]))

        add(OpCase(op, op, build, (_emb(32), _emb(32, "u"), WeightSpec("b", (32,)))))
    add(OpCase("scale", "scale", lambda g, w, s: g.output("y", g.scale(_x(g, 32), -0.37)), (_emb(32),)))
    add(OpCase("softcap", "softcap", lambda g, w, s: g.output("y", g.softcap(g.scale(_x(g, 32), 40.0), 30.0)), (_emb(32),)))
    add(OpCase("softmax", "softmax", lambda g, w, s: g.output("y", g.softmax(g.scale(_x(g, 40), 3.0))), (_emb(40),)))
    add(OpCase("argmax", "argmax", lambda g, w, s: g.output("i", g.argmax(_x(g, 200))), (_emb(200),)))

    def topk(g, w, s):
        x = _x(g, 200)
        ids = g.top_k(x, 5)
        g.output("i", ids)
        g.output("v", g.take(x, ids))

    add(OpCase("top_k", "top_k", topk, (_emb(200),)))
    add(OpCase("concat", "concat", lambda g, w, s: g.output("y", g.concat(_x(g, 24), _x(g, 8, "u"))), (_emb(24), _emb(8, "u"))))

    def rows(g, w, s):
        x = _x(g, 24)
        g.output("a", g.rows(x, (4, 1, 2)))
        g.output("b", g.rows(x, (2, 3)))

    add(OpCase("rows", "rows", rows, (_emb(24),)))
    add(OpCase("seq_mean", "seq_mean", lambda g, w, s: g.output("y", g.seq_mean(_x(g, 24))), (_emb(24),),
               passes=((3, 1, 4),)))  # fmt: skip

    def views(g, w, s):
        y = g.linear(_x(g, 64), w["w"])
        a, b, c = g.split(y, (16, 32, 16))
        g.output("a", g.reshape(b, (g.layout.n_tokens, 2, 16)))
        g.output("b", g.add(a, c))

    add(OpCase("slice_reshape_copy", "slice", views, (_emb(64), WeightSpec("w", (64, 64)))))

    # attention with a cache: prompt then decode steps, GQA, sliding window, soft-capping;
    # several sequences in one batch, each in its own slot
    for label, spec, kv_type, tol, passes in (
        ("f32", AttentionSpec(scale=0.25), "f32", 1e-4, ((6,), (1,), (3,))),
        ("f16", AttentionSpec(scale=0.25), "f16", 1e-2, ((6,), (1,), (1,))),
        ("q8_0", AttentionSpec(scale=0.25), "q8_0", 3e-2, ((6,), (1,), (1,))),
        ("q4_0", AttentionSpec(scale=0.25), "q4_0", 3e-2, ((6,), (1,), (1,))),
        ("q4_0_prompt", AttentionSpec(scale=0.25), "q4_0", 3e-2, ((70,), (1,))),
        ("tq3", AttentionSpec(scale=0.25), "tq3", 3e-2, ((6,), (1,), (1,))),
        ("tq3_prompt", AttentionSpec(scale=0.25, window=40), "tq3", 3e-2, ((70,), (1,))),
        ("tq2", AttentionSpec(scale=0.25, softcap=20.0), "tq2", 3e-2, ((6,), (1,), (2,))),
        ("tq3_key_offset", AttentionSpec(scale=0.25), "tq3", 3e-2, ((6,), (1,), (1,))),
        ("tq2_key_offset_prompt", AttentionSpec(scale=0.25), "tq2", 3e-2, ((70,), (1,))),
        ("window_softcap", AttentionSpec(scale=0.25, window=4, softcap=20.0), "f32", 1e-4, ((6,), (1,), (2,))),
        ("batch", AttentionSpec(scale=0.25), "f32", 1e-4, ((4, 2, 5), (1, 1, 1), (1, 1, 1))),
        ("prompt_tiles", AttentionSpec(scale=0.25), "f32", 1e-4, ((70,), (1,))),
    ):
        def build(g, w, s, spec=spec):
            n = g.layout.n_tokens
            q = g.reshape(_x(g, 128), (n, 4, 32))
            k = g.reshape(_x(g, 64, "k"), (n, 2, 32))
            v = g.reshape(_x(g, 64, "v"), (n, 2, 32))
            g.output("y", g.attention(q, k, v, s[0], spec))

        add(OpCase(f"attention[{label}]", "attention", build, (_emb(128), _emb(64, "k"), _emb(64, "v")),
                   state=(AttentionKV(2, 32, 32, window=spec.window),), passes=passes, tolerance=tol,
                   kv_type=kv_type, key_offset=8.0 if "key_offset" in label else 0.0))  # fmt: skip

    for causal in (True, False):
        def build(g, w, s, causal=causal):
            n = g.layout.n_tokens
            q = g.reshape(_x(g, 64), (n, 4, 16))
            k = g.reshape(_x(g, 32, "k"), (n, 2, 16))
            v = g.reshape(_x(g, 32, "v"), (n, 2, 16))
            g.output("y", g.attention_full(q, k, v, AttentionSpec(scale=0.25, causal=causal)))

        add(OpCase(f"attention_full[{'causal' if causal else 'bidirectional'}]", "attention_full", build,
                   (_emb(64), _emb(32, "k"), _emb(32, "v")), passes=((5, 3),)))  # fmt: skip

    def cross(g, w, s):
        n = g.layout.n_tokens
        if g.layout.seq_lens[0] > 1:  # the "encoder" pass stores the memory
            g.store_cross(g.reshape(_x(g, 32, "k"), (n, 2, 16)), g.reshape(_x(g, 32, "v"), (n, 2, 16)), s[0])
        q = g.reshape(_x(g, 64), (n, 4, 16))
        g.output("y", g.cross_attention(q, s[0], AttentionSpec(scale=0.25)))

    add(OpCase("cross_attention", "cross_attention", cross, (_emb(64), _emb(32, "k"), _emb(32, "v")),
               state=(CrossKV(2, 16, 16, max_len=32),), passes=((6,), (1,), (1,))))  # fmt: skip

    def cross_shared(g, w, s):  # two sequences store their own memories; steps of both read the first's
        n = g.layout.n_tokens
        step = g.layout.seq_lens[0] == 1
        if not step:
            g.store_cross(g.reshape(_x(g, 32, "k"), (n, 2, 16)), g.reshape(_x(g, 32, "v"), (n, 2, 16)), s[0])
        q = g.reshape(_x(g, 64), (n, 4, 16))
        g.output("y", g.cross_attention(q, s[0], AttentionSpec(scale=0.25), shared=step))

    add(OpCase("cross_attention[shared]", "cross_attention", cross_shared, (_emb(64), _emb(32, "k"), _emb(32, "v")),
               state=(CrossKV(2, 16, 16, max_len=32),), passes=((6, 5), (1, 1), (1, 1))))  # fmt: skip

    def conv(g, w, s):
        g.output("y", g.conv1d_causal(_x(g, 24), w["c"], s[0]))

    add(OpCase("conv1d_causal", "conv1d_causal", conv, (_emb(24), WeightSpec("c", (24, 4))),
               state=(ShortConv(24, 4),), passes=((5,), (1,), (2, 3))))  # fmt: skip

    def conv_strided(g, w, s):
        g.output("y", g.conv1d(_x(g, 8), w["c"], w["b"], stride=2, padding=1))

    add(OpCase("conv1d", "conv1d", conv_strided, (_emb(8), WeightSpec("c", (12, 8, 3)), WeightSpec("b", (12,))),
               passes=((9,),)))  # fmt: skip

    def ssm(g, w, s):
        n = g.layout.n_tokens
        x = g.reshape(_x(g, 32), (n, 4, 8))
        dt = _x(g, 4, "dt")
        B = g.reshape(_x(g, 32, "B"), (n, 2, 16))
        C = g.reshape(_x(g, 32, "C"), (n, 2, 16))
        g.output("y", g.ssm_scan(x, dt, w["A"], B, C, s[0]))

    add(OpCase("ssm_scan", "ssm_scan", ssm,
               (_emb(32), _emb(4, "dt"), _emb(32, "B"), _emb(32, "C"), WeightSpec("A", (4,), "F32", 1.0)),
               state=(SSMState(4, 8, 16),), passes=((4,), (1,), (1, 2))))  # fmt: skip

    # Qwen3.5's linear attention: two key heads shared by four value heads (head h reads
    # key head h mod 2), L2-normed q/k, beta = sigmoid(b), log decay g = -softplus(a)
    def delta(g, w, s, grouped=False):
        n = g.layout.n_tokens

        def l2(x):
            return g.scale(g.rms_norm(g.reshape(x, (n, 2, 16)), None, 1e-6 / 16), 0.25)

        q, k = l2(_x(g, 32, "q")), l2(_x(g, 32, "k"))
        v = g.reshape(_x(g, 64, "v"), (n, 4, 16))
        beta = g.unary("sigmoid", _x(g, 4, "b"))
        decay = g.scale(g.unary("softplus", _x(g, 4, "a")), -1.0)
        g.output("y", g.gated_delta_net(q, k, v, decay, beta, s[0], grouped=grouped))

    for grouped in (False, True):  # Qwen3-Next's files pair value heads with key heads in groups
        add(OpCase(f"gated_delta_net[{'grouped' if grouped else 'tiled'}]", "gated_delta_net",
                   lambda g, w, s, grouped=grouped: delta(g, w, s, grouped),
                   (_emb(32, "q"), _emb(32, "k"), _emb(64, "v"), _emb(4, "b"), _emb(4, "a")),
                   state=(SSMState(4, 16, 16),), passes=((5,), (1,), (1, 3), (2, 1))))  # fmt: skip

    for t in ("F32", "Q8_0"):
        def moe(g, w, s):
            g.output("y", g.moe(_x(g, 64), w["r"], w["g"], w["u"], w["d"], k=2, norm_topk=True))

        add(OpCase(f"moe[{t}]", "moe", moe,
                   (_emb(64), WeightSpec("r", (4, 64)), WeightSpec("g", (4, 32, 64), t), WeightSpec("u", (4, 32, 64), t),
                    WeightSpec("d", (4, 64, 32), t)),
                   tolerance=TOL_WEIGHT.get(t, TOL_QUANT)))  # fmt: skip

    # LFM2-MoE's routing (sigmoid, a selection bias, renormalised weights, a scale), SwiGLU
    # and GeGLU experts, over a prompt of many tokens (grouped by expert) and a decode batch
    for act in ("silu", "gelu"):
        def moe_sigmoid(g, w, s, act=act):
            g.output("y", g.moe(_x(g, 64), w["r"], w["g"], w["u"], w["d"], k=3, gating="sigmoid",
                                selection_bias=w["b"], norm_topk=True, weight_scale=2.5, activation=act))  # fmt: skip

        add(OpCase(f"moe[sigmoid,bias,{act}]", "moe", moe_sigmoid,
                   (_emb(64), WeightSpec("r", (8, 64)), WeightSpec("g", (8, 32, 64)), WeightSpec("u", (8, 32, 64)),
                    WeightSpec("d", (8, 64, 32)), WeightSpec("b", (8,), "F32", 0.05)),
                   passes=((19,), (1, 1, 1)), tolerance=TOL_F16_TABLE if act == "gelu" else TOL_FLOAT))  # fmt: skip

    # group-limited routing (Bailing MoE V3, DeepSeek V3): 8 experts in 4 groups, 2 used
    def moe_groups(g, w, s):
        g.output("y", g.moe(_x(g, 64), w["r"], w["g"], w["u"], w["d"], k=3, gating="sigmoid", selection_bias=w["b"],
                            norm_topk=True, weight_scale=2.5, groups=4, groups_used=2))  # fmt: skip

    add(OpCase("moe[groups]", "moe", moe_groups,
               (_emb(64), WeightSpec("r", (8, 64)), WeightSpec("g", (8, 32, 64)), WeightSpec("u", (8, 32, 64)),
                WeightSpec("d", (8, 64, 32)), WeightSpec("b", (8,), "F32", 0.05)),
               passes=((19,), (1, 1, 1))))  # fmt: skip

    # multi-head latent attention's per-head products and gates, Kimi delta attention
    def head_linear(g, w, s):
        g.output("y", g.head_linear(g.reshape(_x(g, 24), (g.layout.n_tokens, 3, 8)), w["w"]))

    add(OpCase("head_linear", "head_linear", head_linear, (_emb(24), WeightSpec("w", (3, 5, 8)))))

    for per in ("head", "element"):
        def gate(g, w, s, per=per):
            n = g.layout.n_tokens
            gates = g.reshape(_x(g, 4, "g"), (n, 4, 1)) if per == "head" else g.reshape(_x(g, 32, "g"), (n, 4, 8))
            g.output("y", g.sigmoid_gate(g.reshape(_x(g, 32), (n, 4, 8)), gates))

        add(OpCase(f"sigmoid_gate[{per}]", "sigmoid_gate", gate, (_emb(32), _emb(4 if per == "head" else 32, "g"))))

    def kda(g, w, s):
        n = g.layout.n_tokens
        q, k, v, f = (g.reshape(_x(g, 32, name), (n, 4, 8)) for name in "qkvf")
        g.output("y", g.kda(q, k, v, f, _x(g, 4, "b"), w["a"], s[0], eps=1e-6, lower_bound=-5.0))

    add(OpCase("kda", "kda", kda,
               (*(_emb(32, name) for name in "qkvf"), _emb(4, "b"), WeightSpec("a", (4,), "F32", 1.0)),
               state=(SSMState(4, 8, 8),), passes=((4,), (1,), (1, 2))))  # fmt: skip
    return cases


# -- models ------------------------------------------------------------------------------------


def check_model(backend, path, manager=None, tokens=(1, 5, 9, 2, 7, 3, 11, 4), steps: int = 4, tolerance: float = 1e-3,
                kv_type: str = "f32") -> float:  # fmt: skip
    """Load the model file on ``backend`` and on the reference, evaluate a prompt and a few
    decode steps, and compare the logits (``tolerance`` relative to the largest logit).
    Returns the largest difference seen."""
    from ..engine import LoadedModel, read_model
    from ..formats.gguf import GGUFFile
    from ..plugins.manager import get_manager
    from . import reference

    gguf = GGUFFile(path)
    try:
        family, model, weights = read_model(gguf, manager or get_manager())
        uploaded = {n: backend.upload(gguf, n) for n in sorted(weights.used)}
        loaded = LoadedModel(Path(path), gguf, model, backend, family.name, [], uploaded)
        want_model = reference.load(path, manager)
        vocab = model.n_vocab
        if not vocab:  # an encoder without an output head: its per-token hidden states instead
            worst = 0.0
            texts = ["the quick brown fox", "a b c d e f g h", "hello"]
            got_all = loaded.embed(texts, pooling="none", normalize=False)
            want_all = want_model.embed(texts, pooling="none", normalize=False)
            for text, got, want in zip(texts, got_all, want_all, strict=True):
                err = float(np.abs(got.astype(np.float64) - want).max())
                worst = max(worst, err)
                scale = max(1.0, float(np.abs(want).max()))
                assert err <= tolerance * scale, f"{Path(path).name}: {text!r}: states differ by {err:.3g} (scale {scale:.3g})"
            want_model.close()
            return worst
        ids = [t % vocab for t in tokens]
        sessions = [m.new_session(n_ctx=len(ids) + steps + 2, kv_type=kv_type) for m in (loaded, want_model)]
        worst = 0.0
        for s in sessions:
            s.append_tokens(ids)
        for step in range(steps + 1):
            got, want = (s.evaluate() for s in sessions)
            err = float(np.abs(got.astype(np.float64) - want).max())
            worst = max(worst, err)
            scale = max(1.0, float(np.abs(want).max()))
            assert err <= tolerance * scale, f"{Path(path).name}: step {step}: logits differ by {err:.3g} (scale {scale:.3g})"
            nxt = int(np.argmax(want))
            for s in sessions:
                s.append_tokens([nxt])
        want_model.close()
        return worst
    finally:
        gguf.close()


__all__ = ["OpCase", "WeightSpec", "check_model", "check_op", "op_cases"]
