"""A compiled pass on the device, and running it.

What compiling made (compile.py: the arena's layout, the dispatches with their
parameters) becomes device objects once: the arena buffer with its constants written,
one uniform buffer of every dispatch's parameters, a read-back buffer for the declared
outputs; bind groups are made once per state (they name the state's buffers). `run`
writes the inputs with one `write_buffer`, records every dispatch into ONE compute pass
(record.py), copies the declared outputs into the read-back buffer in the same command
buffer, submits once and maps that buffer: a greedy decode step reads back one int32 per
sequence. While the device runs a pass, the next run's commands are recorded.
"""

from __future__ import annotations

import math
import threading
import time
import weakref

import numpy as np

from cera.backend import Executable, StepInputs
from cera.errors import SessionError, ShapeError, UnsupportedOperation
from cera.state import shape_key

from . import kernels, record


class VulkanExecutable(Executable):
    """The dispatches of one graph (``dispatches``: lowering.Dispatch) over its arena
    (``mem``: memory.Arena), made for states shaped like ``state``."""

    # the row kernels' rules the benchmarks' sweeps read (kernels.py)
    _mv_feats = staticmethod(kernels.mv_feats)
    _mv_rows = staticmethod(kernels.mv_rows)

    def __init__(self, backend, graph, weights: dict, state, mem, lowering, tuning):
        self.backend = backend
        self.ctx = ctx = backend.ctx
        self.graph = graph
        self.weights = weights
        self.tuning = tuning
        self.geometry = shape_key(state)
        self.kv_type = getattr(state, "kv_type", "f16")
        self._lock = threading.Lock()
        self.mem = mem
        self.dispatches = lowering.dispatches
        self.cross_stores = lowering.cross_stores
        self.cross_reads = lowering.cross_reads
        self.arena_bytes = max(256, mem.end * 4)
        if self.arena_bytes > ctx.max_binding:
            raise UnsupportedOperation(
                f"backend 'vulkan': this pass needs a {self.arena_bytes >> 20} MiB working buffer, more than the "
                f"adapter's largest binding ({ctx.max_binding >> 20} MiB); evaluate fewer tokens per pass (n_batch)"
            )
        self.arena = ctx.buffer(self.arena_bytes, label="arena")
        wgpu = ctx.wgpu
        for off, arr in mem.consts:  # constants, once
            ctx.queue.write_buffer(self.arena, off * 4, arr)
        # parameters, once
        stride = ctx.uniform_align
        params = np.zeros((max(1, len(self.dispatches)), stride // 4), np.uint32)
        for i, d in enumerate(self.dispatches):
            params[i, : len(d.params)] = np.asarray(d.params, np.int64).astype(np.uint32)
        self.params = ctx.device.create_buffer_with_data(data=params, usage=wgpu.BufferUsage.UNIFORM)
        self._stride = stride
        # outputs: copied into one read-back buffer
        self.out_spans = {}
        rb = 0
        for name, t in graph.outputs.items():
            first, count, shape, strides = mem.span(t)
            self.out_spans[name] = (first, count, rb, shape, strides, np.int32 if t.dtype == "i32" else np.float32)
            rb += -(-count * 4 // 8) * 8
        self.readback_bytes = max(16, rb)
        self.readback = ctx.buffer(
            self.readback_bytes, wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST, "outputs"
        )
        self._static_bgs = None
        self._vocab: int | None = None  # rows of the token embedding table (_check)
        self.record_mode = record.default_mode(tuning.record)  # how run records the pass (record.py)
        self._state_bgs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.last_profile: list[tuple[str, float]] = []
        self.timing = (0.0, 0.0)
        self._ready = None  # (plan, command buffer): the next run's commands, recorded ahead

    # -- bind groups ---------------------------------------------------------------------------

    def _plan(self, state) -> record.Plan:
        """The bind groups of state (or of no state) with their raw handles, made once."""
        cached = self._state_bgs.get(state) if state is not None else self._static_bgs
        if cached is None:
            bgs = self._bind_groups(state)
            cached = record.Plan([d.pipe for d in self.dispatches], bgs, [d.groups for d in self.dispatches])
            if state is not None:
                self._state_bgs[state] = cached
            else:
                self._static_bgs = cached
        return cached

    def _bind_groups(self, state) -> list:
        dev = self.ctx.device
        out = []
        for i, d in enumerate(self.dispatches):
            entries = [
                {"binding": 0, "resource": {"buffer": self.params, "offset": i * self._stride, "size": 256}},
                {"binding": 1, "resource": {"buffer": self.arena, "offset": 0, "size": self.arena_bytes}},
            ]
            for j, b in enumerate(d.binds):
                if b[0] == "w":
                    res = {"buffer": b[1].buffer, "offset": b[2], "size": b[3]}
                elif b[0] in ("k", "v"):
                    kv = (state.k if b[0] == "k" else state.v)[b[1]]
                    res = {"buffer": kv.buffer, "offset": 0, "size": kv.buffer.size}
                elif b[0] in ("conv", "ssm"):
                    rec = (state.conv_state if b[0] == "conv" else state.ssm_state)[b[1]]
                    res = {"buffer": rec.buffer, "offset": 0, "size": rec.buffer.size}
                elif b[0] == "koff":
                    buf = state.koff[b[1]]
                    res = {"buffer": buf, "offset": 0, "size": buf.size}
                elif b[0] in ("xk", "xv"):
                    mem = (state.cross_k if b[0] == "xk" else state.cross_v)[b[1]]
                    res = {"buffer": mem.buffer, "offset": 0, "size": mem.buffer.size}
                else:
                    res = {"buffer": state.pos_buffer, "offset": 0, "size": state.pos_buffer.size}
                entries.append({"binding": 2 + j, "resource": res})
            out.append(dev.create_bind_group(layout=d.layout, entries=entries))
        return out

    # -- running ---------------------------------------------------------------------------------

    def _io(self, inputs: StepInputs, cross: dict) -> np.ndarray:
        mem = self.mem
        io = np.zeros(mem.io_words, np.uint32)
        for name, (at, count) in mem.io.items():
            if name == "tokens":
                value = inputs.tokens
            elif name == "positions":
                value = inputs.positions
            elif name in inputs.extra:
                value = inputs.extra[name]
            else:
                raise ShapeError(f"graph input {name!r} was not supplied")
            t = self.graph.inputs[name]
            arr = np.asarray(value, np.int32 if t.dtype == "i32" else np.float32).reshape(-1)
            if arr.size != count:
                raise ShapeError(f"graph input {name!r} has {arr.size} values, the graph was built for {count}")
            io[at : at + count] = arr.view(np.uint32)
        n = mem.n_seq
        groups = self.graph.layout.groups
        s = mem.seq_off
        io[s : s + n] = np.asarray(inputs.slots, np.int64)
        io[s + n : s + 2 * n] = np.asarray(inputs.starts, np.int64)
        io[s + 2 * n : s + 3 * n] = [g[0] for g in groups]
        io[s + 3 * n : s + 4 * n] = [g[1] for g in groups]
        for i, at in mem.cross_off.items():
            io[at : at + len(cross[i])] = cross[i]
        return io

    def _cross_lengths(self, state, inputs: StepInputs) -> dict:
        """The rows of cross-attention memory each slot holds after this pass, per memory
        the graph touches: the host's record with this pass's stores (each sequence's rows
        into its slot). A memory read from a slot that holds none is refused, as the CPU
        backend refuses it."""
        if not self.cross_stores and not self.cross_reads:
            return {}
        slots = np.asarray(inputs.slots)
        used = {*self.cross_stores, *(i for i, _ in self.cross_reads)}
        out = {i: state.cross_len[i].copy() for i in used}
        for i in self.cross_stores:
            for s, (_r0, n) in enumerate(self.graph.layout.groups):
                out[i][slots[s]] = n
        for i, shared in self.cross_reads:
            for slot in slots[:1] if shared else slots:
                if out[i][slot] <= 0:
                    raise SessionError(
                        f"cross_attention: sequence slot {int(slot)} holds no cross-attention memory (state {i}); "
                        f"store one first (an encoder pass)"
                    )
        return out

    def _check(self, state, inputs: StepInputs) -> None:
        if shape_key(state) != self.geometry:
            raise SessionError(
                "this compiled graph was made for a state of another shape (context, slots or cache type)"
            )
        if self._vocab is None:
            # only the tables the token ids index (an encoder also looks up token types and
            # positions, whose tables are smaller than the vocabulary); 0: no such table
            self._vocab = min((self.weights[n.args[0].name].shape[1] for n in self.graph.nodes
                               if n.op == "embedding" and getattr(n.args[1], "name", None) == "tokens"),
                              default=0)  # fmt: skip
        if self._vocab:
            vocab = self._vocab
            toks = np.asarray(inputs.tokens)
            if toks.size and (toks.min() < 0 or toks.max() >= vocab):
                raise ShapeError(f"a token id of {toks.tolist()[:8]} is outside the embedding table of {vocab} rows")
        if state is not None:
            slots = np.asarray(inputs.slots)
            if slots.size and (slots.min() < 0 or slots.max() >= state.n_slots):
                raise ShapeError(f"a sequence slot of {slots.tolist()} is outside the state's {state.n_slots}")

    def run(self, state, inputs: StepInputs, profile: bool | None = None) -> dict[str, np.ndarray]:
        self._check(state, inputs)
        cross = self._cross_lengths(state, inputs)
        profile = self.backend.profile if profile is None else profile
        ctx = self.ctx
        with ctx.lock, self._lock:
            t0 = time.perf_counter()
            plan = self._plan(state)
            ready, self._ready = self._ready, None
            qs = None
            if profile and ctx.timestamps:
                enc = ctx.device.create_command_encoder()
                qs = self._record_profiled(enc, plan.bgs)
                commands = self._finish(enc)
            elif ready is not None and ready[0] is plan:
                commands = ready[1]
            else:
                commands = self._commands(plan)
            # written before the commands run, whenever they were recorded (queue order)
            ctx.queue.write_buffer(self.arena, 0, self._io(inputs, cross))
            t1 = time.perf_counter()
            ctx.queue.submit([commands])
            ctx.n_dispatch += len(self.dispatches)
            if qs is None:
                # the next run's commands, recorded while the device runs these: a decode
                # loop calls again with the same state, and the inputs are data
                self._ready = (plan, self._commands(plan))
            self.readback.map_sync(ctx.wgpu.MapMode.READ)
            try:
                # the outputs are copied once, out of the mapped memory itself (a copy of the
                # whole read-back first, then of each output, cost 3x as much: 195 against
                # 60 us for a 262k-value logits row on the development machine)
                out = self._outputs(self.readback.read_mapped(copy=False))
            finally:
                self.readback.unmap()
            if qs is not None:
                self._read_profile(qs)
            # host time recording the pass, and from the submission to the read-back
            self.timing = (t1 - t0, time.perf_counter() - t1)
            for i in self.cross_stores:  # the memories now hold this pass's rows
                state.cross_len[i][...] = cross[i]
        return out

    def _outputs(self, raw) -> dict[str, np.ndarray]:
        """Each declared output, copied out of the read-back bytes ``raw``."""
        out = {}
        for name, (_first, count, at, shape, (s, last), dtype) in self.out_spans.items():
            flat = np.frombuffer(raw, dtype, count=count, offset=at)
            rows = math.prod(shape[:-1]) if len(shape) > 1 else 1
            if rows > 1 and s != last:
                flat = np.lib.stride_tricks.as_strided(flat, (rows, last), (s * 4, 4))
            out[name] = np.array(flat, copy=True).reshape(shape if self.graph.outputs[name].shape else ())
        return out

    def _commands(self, plan):
        """The command buffer of one run over plan's bind groups: the pass, then the
        outputs' copies into the read-back buffer."""
        enc = self.ctx.device.create_command_encoder()
        cp = enc.begin_compute_pass()
        plan.record(cp, self.record_mode)
        cp.end()
        return self._finish(enc)

    def _finish(self, enc):
        for _name, (first, count, at, *_rest) in self.out_spans.items():
            enc.copy_buffer_to_buffer(self.arena, first * 4, self.readback, at, count * 4)
        return enc.finish()

    # -- profiling ---------------------------------------------------------------------------------

    def _record_profiled(self, enc, bgs):
        """The dispatches with a timestamp before the first and after each: in the one
        pass of a run where the adapter allows timestamps inside passes (each dispatch's
        time is then the gap between its neighbours' stamps, barriers included, as in a
        run), else each dispatch in a pass of its own (which adds the cost of a pass)."""
        wgpu = self.ctx.wgpu
        n = len(self.dispatches)
        # every query of the set is written: resolving one never written waits for it
        chain = self.ctx.timestamps_in_pass
        count = n + 1 if chain else 2 * n
        qs = self.ctx.device.create_query_set(type=wgpu.QueryType.timestamp, count=count)
        if chain:
            cp = enc.begin_compute_pass()
            cp._write_timestamp(qs, 0)
            for i, (d, bg) in enumerate(zip(self.dispatches, bgs, strict=True)):
                cp.set_pipeline(d.pipe)
                cp.set_bind_group(0, bg)
                cp.dispatch_workgroups(d.groups[0], d.groups[1], 1)
                cp._write_timestamp(qs, i + 1)
            cp.end()
            self._profile_stamps = "chain"
        else:
            for i, (d, bg) in enumerate(zip(self.dispatches, bgs, strict=True)):
                cp = enc.begin_compute_pass(timestamp_writes={"query_set": qs, "beginning_of_pass_write_index": 2 * i,
                                                              "end_of_pass_write_index": 2 * i + 1})  # fmt: skip
                cp.set_pipeline(d.pipe)
                cp.set_bind_group(0, bg)
                cp.dispatch_workgroups(d.groups[0], d.groups[1], 1)
                cp.end()
            self._profile_stamps = "pairs"
        buf = self.ctx.buffer(8 * count, wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC, "timestamps")
        enc.resolve_query_set(qs, 0, count, buf, 0)
        return buf

    def _read_profile(self, buf) -> None:
        raw = np.frombuffer(bytes(self.ctx.queue.read_buffer(buf)), np.uint64).astype(np.int64)
        n = len(self.dispatches)
        ns = (np.diff(raw[: n + 1]) if self._profile_stamps == "chain" else raw[1::2] - raw[0::2]).clip(0)
        period = 1.0  # wgpu reports timestamps in nanoseconds
        self.last_profile = [(d.label, float(t) * period) for d, t in zip(self.dispatches, ns, strict=False)]

    def profile(self) -> list[tuple[str, int]]:
        """(kernel, ns) of every dispatch of the last profiled run."""
        return [(name, int(ns)) for name, ns in self.last_profile]


__all__ = ["VulkanExecutable"]
