"""The CPU backend's own fusion (fusion.py): LFM2's gated short convolution is one step,
reading the in-projection's rows in place, with no copies of its slices. That it computes
bit for bit what the ops compute one by one is test_compile.py's check on every tiny family
(tiny-lfm2 and tiny-lfm2moe among them); llama.cpp's logits are test_fidelity.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

TINY = Path(__file__).resolve().parent.parent / "models" / "reference" / "tiny"


@pytest.mark.parametrize("name", ["tiny-lfm2", "tiny-lfm2moe"])
@pytest.mark.parametrize("rows", [(1,), (7,), (3, 4)])
def test_each_short_convolution_is_one_step_without_copies(name, rows):
    import cera
    from cera.graph.builder import ARGMAX, Layout
    from cera_backend_cpu.compile import CpuExecutable
    from cera_backend_cpu.fusion import fuse_gated_convs, gated_conv

    loaded = cera.load(str(TINY / f"{name}.gguf"), device="cpu", threads=2, quiet=True)
    n_conv = sum(loaded.model.config.mixer(i) == "shortconv" for i in range(loaded.model.config.n_layer))
    seen = {}
    import cera_backend_cpu.compile as compile_module

    def spy(graph, steps, place):
        out = fuse_gated_convs(graph, steps, place)
        seen["before"], seen["after"] = steps, out
        return out

    compile_module.fuse_gated_convs, original = spy, compile_module.fuse_gated_convs
    try:
        exe = loaded.runner.executable(Layout(rows), ARGMAX, loaded.runner.new_state(64, n_slots=len(rows)))
    finally:
        compile_module.fuse_gated_convs = original
    assert isinstance(exe, CpuExecutable) and [kind for kind, _ in exe.segments] == ["c"]
    fused = [s for s in seen["after"] if gated_conv(s) is not None]
    assert n_conv > 0 and len(fused) == n_conv
    ops_after = [s.nodes[0].op for s in seen["after"] if gated_conv(s) is None]
    assert "conv1d_causal" not in ops_after and "copy" not in ops_after
    # per convolution, op by op: b * h, the convolution, c * conv, and one copy per slice when
    # the slices are row-strided (more than one row)
    per_conv = 3 + (3 if sum(rows) > 1 else 0)
    assert len(seen["before"]) - len(seen["after"]) == n_conv * (per_conv - 1)
