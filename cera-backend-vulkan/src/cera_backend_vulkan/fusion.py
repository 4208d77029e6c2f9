"""The fusion pass: which of the planner's steps run inside another step's dispatch.

`cera.graph.planning.plan_steps` gives the steps (products of one input with their glu or
residual epilogue, and single ops). Here some steps join their neighbours, each join a
dispatch fewer:

- an rms_norm whose output only the next products read moves into that products kernel
  (wgsl.matvec's ``norm``): ``fused_norm``;
- an rms_norm whose output only a residual add reads takes the add (wgsl.norm's
  residual, a sandwich norm: Gemma 2/3, OLMo 2): ``norm_add``; and where that sum is the
  input of a fused norm, the unit kernel computes the sum itself (``pre_add``);
- a layer's queries' and keys' rotations run as one rope dispatch (``rope_pair``), with
  their per-head norms and the queries' scale (Qwen 3, Gemma 3: ``rope_norm``,
  ``rope_scale``);
- in a decode step the attention over the f16 cache does the rope pair's work itself
  (wgsl.attention_lanes' rotating form: ``rotating``).

Joined steps are one step for the memory plan (`planned`): a joined kernel reads its
parts' inputs, so no output may share memory with them.
"""

from __future__ import annotations

from cera.graph.builder import Tensor
from cera.graph.planning import Step

from .kernels import SHARED_X_BYTES, mv_rows


def consumers(graph) -> dict[int, int]:
    """How many node arguments and graph outputs read each tensor (by id)."""
    out: dict[int, int] = {}
    for node in graph.nodes:
        for t in node.tensors:
            out[t.id] = out.get(t.id, 0) + 1
    for t in graph.outputs.values():
        out[t.id] = out.get(t.id, 0) + 1
    return out


class Fusion:
    """The joins of one graph's steps (module docstring), found by `fuse`."""

    def __init__(self, graph, arena, choice, consumers: dict, tuning):
        self.graph = graph
        self.arena = arena
        self.choice = choice
        self.consumers = consumers
        self.tuning = tuning
        self.fused_norm: dict[int, object] = {}  # products step index -> the rms_norm node it absorbs
        self.rope_pair: set[int] = set()  # ids of rope nodes that join the previous rope's dispatch
        self.norm_add: dict[int, tuple] = {}  # rms_norm node id -> (its add node, the add's other operand)
        self.pre_add: dict[int, tuple] = {}  # products step index -> (that norm, the add, the other operand)
        self.rope_norm: dict[int, object] = {}  # rope node id -> its per-head rms_norm node
        self.rope_scale: dict[int, object] = {}  # the first rope's id -> the queries' scale node
        self.rotating: set[int] = set()  # ids of attention nodes that do their rope pair's work
        self.planned: list[Step] = []

    @property
    def absorbed(self) -> set[int]:
        """Ids of the nodes whose steps another step's lowering runs."""
        return (
            {id(n) for n in self.fused_norm.values()}
            | {id(a) for a, _ in self.norm_add.values()}
            | {id(n) for n in self.rope_norm.values()}
            | {id(n) for n in self.rope_scale.values()}
            | {id(p[0]) for p in self.pre_add.values()}
        )

    def run(self, steps: list[Step]) -> None:
        planned = self.planned
        skip_until = 0
        for i, step in enumerate(steps):
            if i < skip_until:
                continue
            qk = self._qk_norm_rope(steps, i)
            if qk:
                planned.append(Step(tuple(n for st in steps[i : i + qk] for n in st.nodes)))
                skip_until = i + qk
                continue
            if i > 0 and self._can_fuse_norm(steps[i - 1], step):
                self.fused_norm[i] = steps[i - 1].nodes[0]
                pre = self._sandwich_add(planned, steps[i - 1])
                if pre is not None:
                    # the norm and add before join too: one step for the memory plan
                    self.pre_add[i] = pre
                    planned[-2] = Step(planned[-2].nodes + steps[i - 1].nodes + step.nodes, step.glu, step.residual)
                    planned.pop()
                    continue
                planned[-1] = Step(steps[i - 1].nodes + step.nodes, step.glu, step.residual)
                continue
            add = self._norm_then_add(steps[i - 1], step) if i > 0 else None
            if add is not None:
                # the add joins the norm's dispatch (wgsl.norm's residual): one step for
                # the memory plan, so the sum never lands on rows the norm still reads
                self.norm_add[id(steps[i - 1].nodes[0])] = add
                planned[-1] = Step(planned[-1].nodes + step.nodes)
                continue
            if i > 0 and id(steps[i - 1].nodes[0]) not in self.rope_pair and self._rope_pairs(steps[i - 1], step):
                self.rope_pair.add(id(step.nodes[0]))
                planned[-1] = Step(planned[-1].nodes + step.nodes)
                continue
            if planned and self._rotating_attention(planned[-1], step):
                # the attention reads the rotations' inputs: one step for the memory plan,
                # so its output never lands on them
                self.rotating.add(id(step.nodes[0]))
                planned[-1] = Step(planned[-1].nodes + step.nodes)
                continue
            planned.append(step)

    # -- the joins -------------------------------------------------------------------------------

    def _rope_pairs(self, step: Step, nxt: Step) -> bool:
        """Two rotations in a row at the same positions with the same spec and head size
        (a layer's queries and keys): one dispatch."""
        a, b = step.nodes[0], nxt.nodes[0]
        if len(step.nodes) != 1 or len(nxt.nodes) != 1 or a.op != "rope" or b.op != "rope":
            return False
        if step.glu or step.residual or a.args[1] is not b.args[1] or a.attrs["spec"] != b.attrs["spec"]:
            return False
        return (
            a.args[0].shape[2] == b.args[0].shape[2]
            and b.args[0] is not a.out
            and self.arena.contiguous(a.args[0])
            and self.arena.contiguous(b.args[0])
        )

    def _rotating_attention(self, rotations: Step, step: Step) -> bool:
        """Whether step, an attention over the f16 cache, takes the rope pair just before
        it (rotations: the planned step of the pair, with its norms and scale) into its own
        kernel (wgsl.attention_lanes' rotating form, a dispatch a layer fewer): in a pass of
        one row per sequence (a decode step), where nothing else reads the rotated queries
        and keys and the kernel is attention_lanes (the tuning's rope_attention off:
        never)."""
        if not self.tuning.rope_attention:
            return False
        if len(step.nodes) != 1 or step.nodes[0].op != "attention" or step.glu or step.residual:
            return False
        if any(n != 1 for n in self.graph.layout.seq_lens) or self.choice.attention_kernel in ("tiles", "chunked"):
            return False
        ropes = [n for n in rotations.nodes if n.op == "rope"]
        if len(ropes) != 2 or id(ropes[1]) not in self.rope_pair:
            return False
        node = step.nodes[0]
        q, k, v = node.args[:3]
        scale = self.rope_scale.get(id(ropes[0]))
        q_rot = scale.out if scale is not None else ropes[0].out
        return (
            q is q_rot
            and k is ropes[1].out
            and self.consumers.get(q.id, 0) == 1
            and self.consumers.get(k.id, 0) == 1
            and self.choice.lanes_fit(q.shape[2], v.shape[2])
            and self.arena.contiguous(v)
        )

    def _qk_norm_rope(self, steps: list[Step], i: int) -> int:
        """How many steps from i form [rms_norm(q), rms_norm(k)] + [rope(q), rope(k)] +
        [scale(q)], the norms (each over a head, read only by its rope) or the scale (read
        only the query's rotation) or both there (0: not so); records them for the rope
        lowering, which runs them all as one dispatch."""

        def single(k):
            return k < len(steps) and len(steps[k].nodes) == 1 and not steps[k].glu and not steps[k].residual

        if not (single(i) and single(i + 1)):
            return 0
        first = steps[i].nodes[0]
        j = i + 2 if first.op == "rms_norm" else i  # the rotations' first step
        if not (single(j) and single(j + 1) and self._rope_pairs(steps[j], steps[j + 1])):
            return 0
        ra, rb = steps[j].nodes[0], steps[j + 1].nodes[0]
        norms = ()
        if j == i + 2:
            norms = (first, steps[i + 1].nodes[0])
            for norm, rope in zip(norms, (ra, rb), strict=True):
                x, w = norm.args[0], norm.args[1]
                if norm.op != "rms_norm" or rope.args[0] is not norm.out or self.consumers.get(norm.out.id, 0) != 1:
                    return 0
                if isinstance(w, Tensor) or x.shape != norm.out.shape or not self.arena.contiguous(x):
                    return 0
        sc = steps[j + 2].nodes[0] if single(j + 2) else None
        if not (sc is not None and sc.op == "scale" and sc.args[0] is ra.out
                and self.consumers.get(ra.out.id, 0) == 1 and self.arena.contiguous(sc.out)):  # fmt: skip
            sc = None
        if not norms and sc is None:
            return 0
        for rope, norm in zip((ra, rb), norms, strict=False):
            self.rope_norm[id(rope)] = norm
        if sc is not None:
            self.rope_scale[id(ra)] = sc
        self.rope_pair.add(id(rb))
        return j + 2 + (sc is not None) - i

    def _norm_then_add(self, step: Step, nxt: Step):
        """(the add, its other operand) when step is an rms_norm whose output only nxt, an
        add of a contiguous tensor of the same shape, reads (a sandwich norm's residual:
        gemma 2/3, olmo2); else None."""
        node = step.nodes[0]
        if node.op != "rms_norm" or len(step.nodes) != 1 or len(nxt.nodes) != 1 or nxt.is_products:
            return None
        add = nxt.nodes[0]
        if add.op != "add" or self.consumers.get(node.out.id, 0) != 1:
            return None
        a, b = add.args
        other = b if a is node.out else a if b is node.out else None
        if other is None or not isinstance(other, Tensor) or other.shape != node.out.shape:
            return None
        contiguous = self.arena.contiguous
        if not (contiguous(other) and contiguous(node.args[0]) and contiguous(add.out)):
            return None
        return add, other

    def _sandwich_add(self, planned: list, norm_step: Step) -> tuple | None:
        """(norm, add, the add's other operand) where the rms_norm of ``norm_step`` (fused
        into the products after it) reads the sum that the step before it makes, a norm
        and its residual add in one dispatch (`_norm_then_add`: Gemma 2/3's norms after
        attention and the FFN). The unit kernel can compute that sum itself
        (wgsl.matvec_unit's ``pre_add``): one dispatch less. Decode-sized passes whose rows
        fit its shared memory; the tuning's fuse_sandwich off: never."""
        if not self.tuning.fuse_sandwich or len(planned) < 2:
            return None
        if len(planned[-2].nodes) != 2 or len(planned[-1].nodes) != 1:
            return None
        norm, add = planned[-2].nodes
        if self.norm_add.get(id(norm), (None,))[0] is not add or norm_step.nodes[0].args[0] is not add.out:
            return None
        if isinstance(norm.args[1], Tensor):
            return None
        K = add.out.shape[-1]
        M = add.out.size // K
        if self.choice.tiled(M, K) or mv_rows(M) * K * 4 > SHARED_X_BYTES or K % 32:
            return None
        return norm, add, self.norm_add[id(norm)][1]

    def _can_fuse_norm(self, step: Step, nxt: Step) -> bool:
        """An rms_norm whose output only the next step's products read, run by the
        row kernel: its normalisation moves into that kernel (wgsl.matvec's ``norm``)."""
        node = step.nodes[0]
        if node.op != "rms_norm" or len(step.nodes) != 1 or not nxt.is_products:
            return False
        x, w = node.args[0], node.args[1]
        if isinstance(w, Tensor) or not self.arena.contiguous(x) or nxt.nodes[0].args[0] is not node.out:
            return False
        if self.consumers.get(node.out.id, 0) != len(nxt.nodes) or node.out.id in {
            t.id for t in self.graph.outputs.values()
        }:
            return False
        K = x.shape[-1]
        return not self.choice.tiled(x.size // K, K) and K % 8 == 0


def fuse(graph, steps: list[Step], arena, choice, consumers: dict, tuning) -> Fusion:
    """The joins of ``steps`` (module docstring) and the steps of the memory plan."""
    f = Fusion(graph, arena, choice, consumers, tuning)
    f.run(steps)
    return f


__all__ = ["Fusion", "consumers", "fuse"]
