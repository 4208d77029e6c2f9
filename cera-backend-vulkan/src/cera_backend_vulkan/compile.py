"""The Vulkan backend's compiler: a graph becomes a fixed list of dispatches, in passes.

The core has planned the graph (`cera.graph.planning`): views, steps (products of one input
with their glu or residual epilogue), and an arena layout. Here, in order:

1. the fusion pass (fusion.py): which steps run inside another step's dispatch (norms
   into products, residual adds into norms, rope pairs, rotations into attention);
2. the memory layout (memory.py): one device buffer, the arena, for the per-run inputs,
   every activation and the constants kernels read;
3. lowering (lowering/, a module per kind of kernel): each step becomes a dispatch or a
   few, its kernel variant chosen by the rules of kernels.py under the backend's tuning
   (tuning.py), its parameters fixed;
4. the executable (executable.py): the device buffers, made once, and the run that
   records every dispatch into one compute pass (record.py).
"""

from __future__ import annotations

from cera.graph.planning import placements, plan_steps

from .executable import VulkanExecutable
from .fusion import consumers, fuse
from .kernels import BLK_LANES, KernelChoice, grid, unit_cluster, unit_plan, unit_shared_k
from .lowering import Lowering
from .memory import Arena
from .tuning import MATMUL_KERNELS, ROW_KERNELS


def compile_graph(backend, graph, weights: dict, state, tuning) -> VulkanExecutable:
    """``graph`` over the uploaded ``weights``, for states shaped like ``state``, under
    ``tuning`` (a `tuning.VulkanTuning`)."""
    ctx = backend.ctx
    arena = Arena(graph, placements(graph))
    choice = KernelChoice(ctx, tuning, graph.layout.row_mode, backend.tiled, getattr(state, "kv_type", "f16"))
    readers = consumers(graph)
    steps = plan_steps(graph, fuse=True)
    fusion = fuse(graph, steps, arena, choice, readers, tuning)
    arena.plan(fusion.planned, state.n_slots if state is not None else 1)
    lowering = Lowering(ctx, graph, weights, state, arena, choice, fusion, readers)
    lowering.run(steps)
    return VulkanExecutable(backend, graph, weights, state, arena, lowering, tuning)


__all__ = ["BLK_LANES", "MATMUL_KERNELS", "ROW_KERNELS", "VulkanExecutable", "compile_graph", "grid",
           "unit_cluster", "unit_plan", "unit_shared_k"]  # fmt: skip
