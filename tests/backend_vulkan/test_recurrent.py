"""The hybrid and mixture-of-experts families on the Vulkan backend beyond the conformance
suite's prompt and steps: the conv and SSM state on the device survives checkpoints,
restores and resets as the reference's host arrays do, and a decode batch of several slots
gives each row its one-row logits bit for bit (the kernels keep each sequence's sums to
one thread, in its own order)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from .conftest import needs_vulkan

TINY = Path(__file__).resolve().parent.parent / "models" / "reference" / "tiny"
FAMILIES = ["lfm2", "lfm2moe", "qwen3moe", "mamba2", "falcon-h1", "granitehybrid"]


def _load(name: str):
    from cera.engine import LoadedModel, read_model
    from cera.formats.gguf import GGUFFile
    from cera.plugins.manager import get_manager
    from cera_backend_vulkan.backend import VulkanBackend

    path = TINY / f"tiny-{name}.gguf"
    gguf = GGUFFile(path)
    family, model, weights = read_model(gguf, get_manager())
    backend = VulkanBackend()
    uploaded = {n: backend.upload(gguf, n) for n in sorted(weights.used)}
    return path, gguf, LoadedModel(path, gguf, model, backend, family.name, [], uploaded)


@needs_vulkan
@pytest.mark.parametrize("name", ["lfm2", "granitehybrid"])
def test_state_checkpoint_restore_reset(name):
    from cera.testing import reference

    path, gguf, loaded = _load(name)
    want = reference.load(path, None)
    try:
        sessions = [m.new_session(n_ctx=32, kv_type="f32") for m in (loaded, want)]

        def same(what):
            got, ref = (s.evaluate() for s in sessions)
            err = float(np.abs(got.astype(np.float64) - ref).max())
            assert err <= 1e-3 * max(1.0, float(np.abs(ref).max())), f"{name}: {what}: logits differ by {err:.3g}"

        for s in sessions:
            s.append_tokens([1, 5, 9, 2])
        same("prompt")
        cps = [s.checkpoint() for s in sessions]
        for t in (7, 3, 11):
            for s in sessions:
                s.append_tokens([t])
            same(f"step {t}")
        for s, cp in zip(sessions, cps, strict=True):
            s.restore(cp)
        for s in sessions:
            s.append_tokens([4, 4])
        same("after a restore")
        for s in sessions:
            s.reset()
            s.append_tokens([2, 3, 4])
        same("after a reset")
    finally:
        want.close()
        gguf.close()


@needs_vulkan
@pytest.mark.parametrize("kernels", ["adapter", "gpu"])
@pytest.mark.parametrize("name", FAMILIES)
def test_decode_batch_rows_are_their_one_row_passes(name, kernels):
    """``kernels``: as this adapter chooses them, and as a GPU does (the workgroup row
    kernel, the tiled one for passes of more than 8 rows) even on lavapipe: the H200 ran
    the latter."""
    from cera.graph.builder import ALL_LOGITS
    from cera.generation.runtime import SeqStep

    _, gguf, loaded = _load(name)
    ctx = loaded.backend.ctx  # the process's one context of this adapter: restored below
    software = ctx.software
    if kernels == "gpu":
        ctx.software = False
    try:
        runner = loaded.runner
        rng = np.random.default_rng(3)
        prompts = [rng.integers(0, loaded.model.n_vocab, 5 + 3 * i).tolist() for i in range(3)]
        alone = []
        for p in prompts:
            st = runner.new_state(64)
            runner.forward(st, [SeqStep(0, p, range(len(p)))], ALL_LOGITS)
            alone.append(runner.forward(st, [SeqStep(0, [7], [len(p)])], ALL_LOGITS)["logits"][0])
        # each prompt in a pass of its own in its slot (on a GPU, three prompts in one pass
        # of 24 rows would take the tiled kernel where a 5-row pass takes the row kernel:
        # another state; what is promised is the decode batch), then one decode batch
        st = runner.new_state(64, n_slots=3)
        for _ in prompts:
            st.acquire()
        for i, p in enumerate(prompts):
            runner.forward(st, [SeqStep(i, p, range(len(p)))], ALL_LOGITS)
        batch = runner.forward(st, [SeqStep(i, [7], [len(p)]) for i, p in enumerate(prompts)], ALL_LOGITS)["logits"]
        for i in range(len(prompts)):
            assert np.array_equal(batch[i], alone[i]), f"{name}: row {i} of the decode batch"
    finally:
        ctx.software = software
        gguf.close()


@needs_vulkan
@pytest.mark.parametrize("types", [("Q4_K", "Q4_K", "Q6_K"), ("IQ4_NL", "Q8_0", "Q2_K"), ("Q5_1", "F16", "BF16")],
                         ids=lambda t: "/".join(t))  # fmt: skip
def test_moe_expert_types(vulkan, types):
    """Expert tensors of the quantized types (rows of 256 for the K types; gate and up of
    different types in one kernel) against the reference, a prompt and a decode batch."""
    from cera.testing import conformance as C

    tg, tu, td = types

    def moe(g, w, s):
        g.output("y", g.moe(C._x(g, 256), w["r"], w["g"], w["u"], w["d"], k=2, norm_topk=True))

    weights = (C._emb(256), C.WeightSpec("r", (4, 256)), C.WeightSpec("g", (4, 256, 256), tg),
               C.WeightSpec("u", (4, 256, 256), tu), C.WeightSpec("d", (4, 256, 256), td))  # fmt: skip
    C.check_op(
        vulkan, C.OpCase(f"moe[{tg},{tu},{td}]", "moe", moe, weights, passes=((7,), (1, 1)), tolerance=C.TOL_QUANT)
    )


@needs_vulkan
@pytest.mark.parametrize("name", ["lfm2", "mamba2"])
def test_copy_cells_as_the_reference(name):
    """Slots copied on the device (`VulkanState.copy_cells`: caches, conv/SSM state and
    positions; a search's hypotheses, as Whisper's beams) and then decoded give the
    reference's logits, whose host arrays are copied by `HostState.copy_cells`. The copy
    is a permutation with a repeat: slot 0 takes slot 1's sequence, slots 1 and 2 slot 0's."""
    from cera.graph.builder import ALL_LOGITS
    from cera.generation.runtime import SeqStep
    from cera.testing import reference

    path, gguf, loaded = _load(name)
    want = reference.load(path, None)
    try:
        rng = np.random.default_rng(5)
        prompts = [rng.integers(0, loaded.model.n_vocab, 4 + 3 * i).tolist() for i in range(3)]
        src, dst = [1, 0, 0], [0, 1, 2]
        logits = []
        for m in (loaded, want):
            runner = m.runner
            st = runner.new_state(32, n_slots=3, kv_type="f32")
            for i, p in enumerate(prompts):
                st.acquire()
                runner.forward(st, [SeqStep(i, p, range(len(p)))], ALL_LOGITS)
            st.copy_cells(src, dst)
            steps = [SeqStep(d, [7], [len(prompts[s])]) for s, d in zip(src, dst, strict=True)]
            logits.append(runner.forward(st, steps, ALL_LOGITS)["logits"].astype(np.float64))
        got, ref = logits
        err = float(np.abs(got - ref).max())
        assert err <= 1e-3 * max(1.0, float(np.abs(ref).max())), f"{name}: logits differ by {err:.3g}"
        # the copies are the sequences copied: slots 1 and 2 decode alike
        assert np.array_equal(got[1], got[2])
    finally:
        want.close()
        gguf.close()
