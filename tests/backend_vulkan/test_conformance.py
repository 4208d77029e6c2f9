"""The Vulkan backend through the conformance suite (cera.testing.conformance): every op it
declares against the numpy reference backend, with the suite's stated tolerances, and the
tiny families model by model. On lavapipe in CI; skipped where no Vulkan adapter exists."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cera.testing import conformance

from .conftest import needs_vulkan

TINY = sorted((Path(__file__).resolve().parent.parent / "models" / "reference" / "tiny").glob("tiny-*.gguf"))


def _cases():
    from cera_backend_vulkan.capabilities import OPS, TENSOR_TYPES

    return conformance.op_cases(TENSOR_TYPES, OPS)


@needs_vulkan
@pytest.mark.parametrize("case", _cases(), ids=str)
def test_op(vulkan, case):
    conformance.check_op(vulkan, case)


@needs_vulkan
@pytest.mark.parametrize(
    "case", [c for c in _cases() if c.op == "linear" and "x" not in c.name.split(",")[-1]], ids=str
)
@pytest.mark.parametrize("matmul", ["4x4", "4x8", "4x4-m32", "4x4-split", "4x4-skew", "4x4-skew-split"])
def test_tiled_products(case, matmul, monkeypatch):
    """The tiled kernels of many-row products (a GPU's choice) on every weight type, also
    on a software adapter, whose own choice is the row kernel."""
    from cera_backend_vulkan.backend import VulkanBackend

    monkeypatch.setenv("CERA_VULKAN_MATMUL", matmul)
    b = VulkanBackend()
    b.tiled = True
    conformance.check_op(b, case)


def test_split_counts():
    """The depth splits of the split kernels (kernels.matmul_splits), worked out by hand
    from their rule: below 1024 workgroups, as many spans as bring the grid to 1024, at
    most 8, each of 16 steps of 32 columns or more."""
    from cera_backend_vulkan.kernels import matmul_splits as splits

    assert splits(1536, 512, 8960, 4, 64) == 6  # Qwen2.5 1.5B's down: 24 x 8 = 192 groups
    assert splits(1536, 512, 1536, 4, 64) == 3  # its q and o: 48 steps, 3 spans of 16
    assert splits(256, 512, 1536, 4, 64) == 3  # its k and v: 32 groups, 48 steps
    assert splits(8960, 512, 1536, 4, 64) == 1  # gate, up: 1120 groups
    assert splits(896, 512, 896, 4, 64) == 1  # Qwen2.5 0.5B's q: 28 steps
    assert splits(896, 512, 4864, 4, 64) == 8  # its down: 112 groups, 152 steps
    assert splits(576, 512, 1536, 4, 64) == 3  # SmolLM2's down: 72 groups, 48 steps
    assert splits(200, 70, 2048, 4, 64) == 4  # the test below: 8 groups, 64 steps
    assert splits(200, 70, 512, 4, 64) == 1  # 16 steps: no split


@needs_vulkan
@pytest.mark.parametrize("t", ["Q4_K", "Q8_0", "F16", "Q6_K"])
def test_split_products(t, monkeypatch):
    """The tiled product with its depth split over workgroups ("4x4-split": partial sums
    in scratch, joined by wgsl.matmul_splits with the bias and the residual) against the
    reference: 70 rows of 2048 values, 200 features, in four spans."""
    from cera.testing.conformance import OpCase, WeightSpec, _emb, _x
    from cera_backend_vulkan.backend import VulkanBackend
    from cera_backend_vulkan.lowering import Lowering

    def build(g, w, s):
        y = g.linear(_x(g, 2048), w["w"], w["b"])
        g.output("y", g.add(y, _x(g, 200, "r")))

    case = OpCase(f"linear[{t},70x2048x200]", "linear", build,
                  (_emb(2048), WeightSpec("w", (200, 2048), t), WeightSpec("b", (200,), "F32"), _emb(200, "r")),
                  passes=((70,),), tolerance=conformance.TOL_WEIGHT.get(t, conformance.TOL_QUANT))  # fmt: skip
    labels = []
    emit = Lowering.emit

    def record(self, key, source, params, groups, binds=(), read_only=(), label="?"):
        labels.append(label)
        return emit(self, key, source, params, groups, binds, read_only, label)

    monkeypatch.setattr(Lowering, "emit", record)
    monkeypatch.setenv("CERA_VULKAN_MATMUL", "4x4-split")
    b = VulkanBackend()
    b.tiled = True
    conformance.check_op(b, case)
    assert "matmul (splits)" in labels, labels


@needs_vulkan
@pytest.mark.parametrize("t", ["Q4_K", "Q8_0", "F16"])
def test_tiled_kernels_give_the_same_bits(t, monkeypatch):
    """The tiled kernels sum each output over k in the same order (wgsl.matmul): the
    same bits, on 70 rows and 200 features (row tiles of both sizes and feature tiles of
    both sizes filled in part), each also within the suite's tolerance of the reference."""
    import attrs

    from cera_backend_vulkan.backend import VulkanBackend

    base = next(c for c in _cases() if c.name == f"linear[{t},20]")
    x, w, bias = base.weights
    case = attrs.evolve(
        base,
        name=f"linear[{t},70x200]",
        weights=(x, attrs.evolve(w, numpy_shape=(200, 256)), attrs.evolve(bias, numpy_shape=(200,))),
        passes=((70,),),
    )
    compare = conformance._compare
    got = {}
    for kernel in ("4x4", "4x8", "4x4-m32", "4x4-skew"):
        monkeypatch.setenv("CERA_VULKAN_MATMUL", kernel)
        seen = []

        def keep(case, i, g, want, seen=seen):
            seen.append(g)
            compare(case, i, g, want)

        monkeypatch.setattr(conformance, "_compare", keep)
        b = VulkanBackend()
        b.tiled = True
        conformance.check_op(b, case)
        got[kernel] = seen
    for other in ("4x8", "4x4-m32", "4x4-skew"):
        for a, b in zip(got["4x4"], got[other], strict=True):
            for name in a:
                x, y = np.asarray(a[name]), np.asarray(b[name])
                assert x.shape == y.shape and np.array_equal(x.view(np.uint32), y.view(np.uint32)), (other, name)


@needs_vulkan
@pytest.mark.parametrize(
    "kernel",
    [
        "unit-auto",
        "unit-auto-gx",
        "unit-auto-sx",
        "unit-auto-c4",
        "unit-auto-cfit",
        "unit",
        "unit-f1",
        "unit-f4",
        "unit-wg2",
        "workgroup",
        "workgroup-1pass",
        "subgroup",
        "subgroup-x2",
        "subgroup-x4",
        "subgroup-blk",
        "subgroup-blk8",
        "subgroup-blk-v4",
    ],
)
@pytest.mark.parametrize(
    "case", [c for c in _cases() if c.op == "linear" and c.name.endswith(("1]", "1x1x1]"))], ids=str
)
def test_row_kernels(case, kernel):
    """Both row kernels of few-row products (a workgroup per feature, as GPUs run them;
    a subgroup per feature, as software adapters do) on every weight type, whichever this
    adapter would choose."""
    from cera_backend_vulkan.backend import VulkanBackend

    b = VulkanBackend()
    if kernel.startswith("subgroup") and not b.ctx.subgroups:
        pytest.skip("this adapter has no subgroup operations")
    b.row_kernel = kernel
    conformance.check_op(b, case)


@needs_vulkan
@pytest.mark.parametrize("path", TINY, ids=[p.stem for p in TINY])
@pytest.mark.parametrize("row_kernel", [None, "workgroup", "workgroup-1pass", "unit", "unit-auto"])
def test_tiny_family(vulkan, path, row_kernel):
    from cera.engine import model_ops, read_model
    from cera.errors import CeraError
    from cera.formats.gguf import GGUFFile
    from cera.plugins.manager import get_manager

    try:
        with GGUFFile(path) as g:
            _, model, _ = read_model(g, get_manager())
            missing = vulkan.missing_ops(model_ops(model, 64))
    except CeraError as e:
        pytest.skip(f"{path.stem}: {e}")
    if missing:
        pytest.skip(f"{path.stem} uses ops {missing} the Vulkan backend does not have yet")
    # F32 weights and f32 arithmetic throughout; the reference uses float64 and the gemma
    # families' GELU through ggml's f16 table is the largest term (conformance.TOL_F16_TABLE)
    # row_kernel "workgroup(-1pass)": the GPUs' few-row kernels (with Q/K/V in one
    # dispatch; -1pass is their default) also where this adapter would choose otherwise
    from cera_backend_vulkan.backend import VulkanBackend

    b = VulkanBackend()
    b.row_kernel = row_kernel
    conformance.check_model(b, path, tolerance=conformance.TOL_F16_TABLE)


def _quantized_copy(src: Path, dst: Path, ggml_type: str) -> Path:
    """``src`` with every 2-D weight matrix (norms aside) as random valid blocks of
    ``ggml_type``: the same model shape, weights of that type in every product, so that
    the compiled graph's fusions (Q/K/V in one dispatch, gate and up with their glu) read
    two or three weights of the type in one kernel."""
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter

    from cera.testing.conformance import _random_blocks

    rng = np.random.default_rng(0)
    reader = GGUFReader(str(src))
    w = GGUFWriter(str(dst), reader.fields["general.architecture"].contents())
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.file_type"):
            continue
        if field.types[0] == GGUFValueType.ARRAY:
            w.add_key_value(key, field.contents(), GGUFValueType.ARRAY, sub_type=field.types[-1])
        else:
            w.add_key_value(key, field.contents(), field.types[0])
    for t in reader.tensors:
        shape = tuple(int(d) for d in t.shape)
        if len(shape) == 2 and t.name.endswith(".weight") and "norm" not in t.name:
            data = _random_blocks(ggml_type, shape[1], shape[0], rng)
            w.add_tensor(t.name, data, raw_shape=data.shape, raw_dtype=GGMLQuantizationType[ggml_type])
        else:
            w.add_tensor(t.name, np.array(t.data), raw_dtype=GGMLQuantizationType(int(t.tensor_type)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


@needs_vulkan
@pytest.mark.parametrize("ggml_type", ["IQ4_NL", "Q4_0"])
@pytest.mark.parametrize(
    "row_kernel",
    [None, "workgroup", "workgroup-1pass", "subgroup-x4", "subgroup-blk", "subgroup-blk8", "subgroup-blk-v4",
     "unit-auto"],
)  # fmt: skip
def test_tiny_family_with_quantized_weights(ggml_type, row_kernel, tmp_path, monkeypatch):
    """A decoder whose products all read one quantized type, against the reference: the
    fused kernels take several weights of a type at once (two IQ4_NL weights in one kernel
    once defined its lookup table twice, which WGSL refuses). The unit kernel's products
    in f32 here (the GPUs' default rounds x to 8 bits, which this tolerance is not for:
    test_tiny_family_with_integer_products)."""
    from cera_backend_vulkan.backend import VulkanBackend

    monkeypatch.setenv("CERA_VULKAN_UNIT_DOT", "f32")
    src = next(p for p in TINY if p.stem == "tiny-mistral")
    path = _quantized_copy(src, tmp_path / f"tiny-mistral-{ggml_type}.gguf", ggml_type)
    b = VulkanBackend()
    b.row_kernel = row_kernel
    conformance.check_model(b, path, tolerance=conformance.TOL_F16_TABLE)


@needs_vulkan
@pytest.mark.parametrize("ggml_type", ["Q4_0", "Q8_0", "Q5_1"])
def test_tiny_family_with_integer_products(ggml_type, tmp_path):
    """The GPUs' default products (the unit kernel, x rounded to 8 bits a unit and
    quantized once a workgroup) on a whole decoder: its logits' error against the
    reference at most 1.5x the CPU backend's on the same file (which rounds x to 8 bits
    too, as llama.cpp does)."""
    from cera_backend_vulkan.backend import VulkanBackend

    cpu = pytest.importorskip("cera_backend_cpu.backend", reason="the CPU backend is the comparison")
    src = next(p for p in TINY if p.stem == "tiny-mistral")
    path = _quantized_copy(src, tmp_path / f"tiny-mistral-{ggml_type}.gguf", ggml_type)
    b = VulkanBackend()
    if not b.ctx.subgroups:
        pytest.skip("this adapter has no subgroup operations (the unit kernel needs them)")
    b.row_kernel = "unit-auto"
    got = conformance.check_model(b, path, tolerance=0.2)
    want = conformance.check_model(cpu.CpuBackend(), path, tolerance=0.2)
    assert got <= 1.5 * want, (got, want)



@needs_vulkan
@pytest.mark.parametrize("case", [c for c in _cases() if c.op == "argmax"], ids=str)
def test_argmax_two_stage(case, monkeypatch):
    """The two-stage argmax of long rows (chunks, then their best) on the conformance
    case, split into chunks of 3 values."""
    from cera_backend_vulkan.backend import VulkanBackend
    from cera_backend_vulkan.lowering import rows

    monkeypatch.setattr(rows, "SELECT_SPLIT", 4)
    monkeypatch.setattr(rows, "SELECT_CHUNK", 3)
    conformance.check_op(VulkanBackend(), case)


@needs_vulkan
@pytest.mark.parametrize("n", [20001, 151936])
def test_argmax_two_stage_ties(n):
    """Two-stage and one-workgroup argmax agree bit for bit on rows full of ties (the
    lowest index wins), as numpy's argmax."""
    import numpy as np

    from cera_backend_vulkan import device as gpu
    from cera_backend_vulkan import wgsl
    from cera_backend_vulkan.kernels import grid
    from cera_backend_vulkan.lowering.rows import SELECT_CHUNK

    ctx = gpu.context(0)
    wgpu = ctx.wgpu
    rng = np.random.default_rng(1)
    rows = 3
    x = rng.integers(-4, 4, (rows, n)).astype(np.float32)  # the maximum 3 appears many times
    x[1] = -1.0
    x[1, [n - 1, n // 2 + 7, 5000]] = 2.0  # ties across chunks
    x[2, :] = -7.5  # all equal: index 0
    chunk = max(SELECT_CHUNK, -(-n // 1024))
    chunks = -(-n // chunk)
    scratch = rows * n
    out1, out2 = scratch + 2 * rows * chunks, scratch + 2 * rows * chunks + rows
    arena = ctx.buffer((out2 + rows) * 4)
    ctx.queue.write_buffer(arena, 0, np.ascontiguousarray(x))
    runs = [
        (("select",), wgsl.select_top, [rows, n, 0, out1, 1, 0], rows),
        (("select_partial",), wgsl.select_partial, [rows, n, 0, scratch, chunk, chunks], rows * chunks),
        (("select_combine",), wgsl.select_combine, [rows, chunks, scratch, out2, 0, 0], rows),
    ]
    enc = ctx.device.create_command_encoder()
    keep = []
    for key, src, params, groups in runs:
        pipe, layout = ctx.pipeline(key, src, 2)
        p = np.zeros(64, np.uint32)
        p[: len(params)] = params
        pbuf = ctx.device.create_buffer_with_data(data=p, usage=wgpu.BufferUsage.UNIFORM)
        bg = ctx.device.create_bind_group(
            layout=layout,
            entries=[
                {"binding": 0, "resource": {"buffer": pbuf, "offset": 0, "size": 256}},
                {"binding": 1, "resource": {"buffer": arena, "offset": 0, "size": arena.size}},
            ],
        )
        keep.append((pbuf, bg))
        cp = enc.begin_compute_pass()
        cp.set_pipeline(pipe)
        cp.set_bind_group(0, bg)
        gx, gy = grid(groups)
        cp.dispatch_workgroups(gx, gy, 1)
        cp.end()
    ctx.queue.submit([enc.finish()])
    got = np.frombuffer(bytes(ctx.queue.read_buffer(arena, out1 * 4, 2 * rows * 4)), np.int32)
    want = np.argmax(x, axis=1)
    assert got[:rows].tolist() == want.tolist()
    assert got[rows:].tolist() == want.tolist()


def _f16_attention_cases():
    """The suite's cached-attention cases over an f16 cache (the caches models run with),
    and longer ones: several 128-cell chunks, and a sliding window whose cells wrap
    around a ring."""
    import attrs

    from cera.graph.builder import AttentionSpec

    base = next(c for c in _cases() if c.name == "attention[f16]")
    out = []
    for c in _cases():
        if c.op == "attention" and c.kv_type == "f32":
            out.append(attrs.evolve(c, name=c.name.replace("]", ",f16]"), kv_type="f16", tolerance=1e-2))
    long_passes = ((150,), (100,), (1,), (1,))
    out.append(attrs.evolve(base, name="attention[f16,long]", passes=long_passes, n_ctx=400))
    # long enough for a split attention's many parts (600 cells: 5 of 16), and a decode
    # batch of two sequences after prompts of different lengths
    out.append(attrs.evolve(base, name="attention[f16,split]", passes=((600,), (1,), (3,), (1,)), n_ctx=1100))
    out.append(attrs.evolve(base, name="attention[f16,split,batch]", passes=((300, 170), (1, 1), (1, 1)), n_ctx=1100))
    spec = AttentionSpec(scale=0.25, window=40, softcap=20.0)
    window = attrs.evolve(out[0], name="attention[f16,window,ring]", passes=((30,), (25,), (1,), (20,), (1,)))

    def build(g, w, s, spec=spec):
        n = g.layout.n_tokens
        q = g.reshape(conformance._x(g, 128), (n, 4, 32))
        k = g.reshape(conformance._x(g, 64, "k"), (n, 2, 32))
        v = g.reshape(conformance._x(g, 64, "v"), (n, 2, 32))
        g.output("y", g.attention(q, k, v, s[0], spec))

    out.append(attrs.evolve(window, build=build, state=(conformance.AttentionKV(2, 32, 32, window=40),)))

    # Gemma 3's heads (256 values, one KV head for four): a thread has a quarter of a
    # chunk's cells, so the values' eight-at-a-time path of "lanes" runs
    def wide(g, w, s):
        n = g.layout.n_tokens
        q = g.reshape(conformance._x(g, 1024), (n, 4, 256))
        k = g.reshape(conformance._x(g, 256, "k"), (n, 1, 256))
        v = g.reshape(conformance._x(g, 256, "v"), (n, 1, 256))
        g.output("y", g.attention(q, k, v, s[0], AttentionSpec(scale=0.0625)))

    out.append(attrs.evolve(base, name="attention[f16,heads256]", build=wide, passes=((150,), (1,), (1,)), n_ctx=400,
                            weights=(conformance._emb(1024), conformance._emb(256, "k"), conformance._emb(256, "v")),
                            state=(conformance.AttentionKV(1, 256, 256),)))  # fmt: skip
    return out


@needs_vulkan
@pytest.mark.parametrize("kernel", ["lanes", "lanes-split", "tiles", "chunked"])
@pytest.mark.parametrize("case", _f16_attention_cases(), ids=str)
def test_attention_kernels_f16(case, kernel, monkeypatch):
    """The kernels of attention over an f16 cache against the reference: "lanes" (the
    default; wgsl.attention_lanes), "lanes-split" (its cells split over workgroups, then
    wgsl.attention_combine) and "chunked" (wgsl.attention), including contexts of several
    chunks, a sliding window on a ring of cells, and heads of 256 values."""
    from cera_backend_vulkan.backend import VulkanBackend

    monkeypatch.setenv("CERA_VULKAN_ATTENTION", kernel)
    conformance.check_op(VulkanBackend(), case)


@needs_vulkan
@pytest.mark.parametrize("n", [1024, 1025, 1500])
def test_norms_of_long_rows(vulkan, n):
    """wgsl.norm keeps rows of at most 1024 values in registers and reads longer ones
    again: both paths, and the edge between them, against the reference."""
    from cera.testing.conformance import OpCase, WeightSpec, _emb, _x

    def build(g, w, s):
        x = _x(g, n)
        g.output("y", g.rms_norm(x, w["n"], 1e-5))
        g.output("z", g.layer_norm(x, w["n"], w["b"], 1e-5))

    case = OpCase(f"norms[{n}]", "rms_norm", build, (_emb(n), WeightSpec("n", (n,)), WeightSpec("b", (n,))))
    conformance.check_op(vulkan, case)
