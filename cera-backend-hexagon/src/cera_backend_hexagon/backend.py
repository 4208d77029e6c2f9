"""The Hexagon backend: `cera.backend.Backend` on Qualcomm's HTP through QNN.

- `compile` lowers a graph to ONNX (lower.py), which onnxruntime's QNN execution provider
  compiles for the SoC with CPU fallback off (qnn.py); the result is kept as an HTP context
  binary in cera's cache folder (cache.py) and reused by every later run of the same model
  file, SoC and graph. On a Snapdragon the binaries run on the NPU; with
  ``CERA_HEXAGON_TARGET=simulator`` on QNN's x86-64 HTP simulator (target.py).
- Weights are converted to float16 when a graph is built (weights.py); a cached graph
  needs none of them.
- The state is `cera.state.HostState` with an f16 KV cache; a run feeds each layer's
  cache in and writes the new keys and values back (see lower.py).
- Greedy decoding returns one int32 per sequence: argmax is part of the graph.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import attrs
import numpy as np

from cera.backend import Backend, BackendOptions, DeviceInfo, Executable, StepInputs
from cera.errors import UnsupportedOperation
from cera.state import HostState

from . import cache, qnn
from .capabilities import KV_TYPES, OPS, TENSOR_TYPES
from .lower import full_mask, kv_mask, lower, rope_tables
from .target import require, resolve_soc, target
from .weights import HexagonWeight, file_hash


@attrs.frozen
class HexagonOptions(BackendOptions):
    """``soc``: the Snapdragon the graphs are built for (default $CERA_HEXAGON_SOC, else
    SM8650, the Snapdragon 8 Gen 3); see `cera_backend_hexagon.target.SOCS`. ``profile``:
    record QNN's per-run profile (HTP cycles) of every graph (`HexagonExecutable.cycles`)."""

    soc: str | None = None
    profile: bool = False


class HexagonBackend(Backend):
    name = "hexagon"
    tensor_types = TENSOR_TYPES
    ops = OPS
    options_type = HexagonOptions

    def __init__(self, soc: str | None = None, device_index: int = 0, memory_limit: int | None = None,
                 profile: bool = False):  # fmt: skip
        self.where = require()
        self.soc = resolve_soc(soc)
        self.memory_limit = memory_limit
        self._profile_dir = tempfile.TemporaryDirectory(prefix="cera-hexagon-profile-") if profile else None
        self.stats: list[dict] = []  # one entry per compiled or loaded graph (for `cera hexagon-compile`, tests)

    def probe(self) -> DeviceInfo:
        sim = self.where == "simulator"
        device = f"Hexagon HTP v{self.soc.htp_arch} ({self.soc.product}, {self.soc.name})" + (
            " on QNN's x86-64 simulator" if sim else ""
        )
        # the simulator computes on the CPU: passed over under --device auto, used when named
        return DeviceInfo(True, device, self.memory_limit, None, software=sim)

    def compile_key(self) -> tuple:
        return (self.soc.label,)

    def upload(self, gguf, name: str) -> HexagonWeight:
        info = gguf.tensors[name]
        self.check_weight_type(name, info.type_name)
        return HexagonWeight(gguf, name)

    def new_state(self, spec, n_ctx, n_slots=1, kv_type="f16", n_batch=512, swa_full=False, key_offsets=None):
        if kv_type not in KV_TYPES and "kv" in spec.kinds():
            raise UnsupportedOperation(
                f"backend 'hexagon' keeps the KV cache in float16 (the HTP computes attention in float16), not {kv_type!r}; "
                "use kv_type f16 (--kv-type f16)"
            )
        kinds = spec.kinds() - {"kv", "conv"}
        if kinds:
            raise UnsupportedOperation(f"backend 'hexagon' has no HTP graphs for {', '.join(sorted(kinds))} state")
        return HostState(spec, n_ctx, n_slots=n_slots, kv_type=kv_type, n_batch=n_batch, swa_full=swa_full,
                         key_offsets=key_offsets)  # fmt: skip

    def compile(self, graph, weights: Mapping[str, HexagonWeight], state) -> HexagonExecutable:
        self.check_ops(graph)
        kv_cells = {i: int(a.shape[2]) for i, a in getattr(state, "k", {}).items()} if state is not None else {}
        lowered = lower(graph, kv_cells)
        used = graph.weights_used()
        files = sorted({str(weights[n].file) for n in used}) if used else []
        digest = ",".join(file_hash(Path(f)) for f in files) or "no-weights"
        what = f"a graph of {graph.layout.n_tokens} token(s) in {graph.layout.n_seq} sequence(s)"
        desc = "\n".join([
            graph.describe(), f"sequences={graph.layout.seq_lens}", f"cells={sorted(kv_cells.items())}",
            "outputs=" + ",".join(f"{k}:%{t.id}" for k, t in sorted(graph.outputs.items())),
        ])  # fmt: skip
        key = cache.graph_key(digest, self.soc, desc)
        ctx = cache.lookup(self.soc, key)
        profile = Path(self._profile_dir.name) / f"{key}-{len(self.stats)}.csv" if self._profile_dir else None
        if ctx is not None:
            t0 = time.perf_counter()
            session = qnn.load_context(ctx, self.soc, what, profile)
            info = dict(cache.meta(ctx), cached=True, load_s=round(time.perf_counter() - t0, 3), path=str(ctx))
        else:
            session, info = self._build(lowered, graph, weights, key, what, profile)
        self.stats.append(info)
        return HexagonExecutable(graph, lowered, session, info, profile)

    def close(self) -> None:
        if self._profile_dir is not None:
            self._profile_dir.cleanup()
            self._profile_dir = None

    def _build(self, lowered, graph, weights, key, what, profile=None):
        import onnx

        def values(name, layout):
            w = weights[name]
            a = w.values_f16()
            return np.ascontiguousarray(a.T) if layout == "transposed" else a

        model = lowered.model(values)
        tmp = cache.staging(self.soc, key)
        try:
            with tempfile.TemporaryDirectory(prefix="cera-hexagon-onnx-", dir=tmp.parent) as src:
                path, data = Path(src) / "graph.onnx", Path(src) / "graph.data"
                onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                          location=data.name, size_threshold=1024)  # fmt: skip
                del model
                onnx_bytes = path.stat().st_size + (data.stat().st_size if data.exists() else 0)
                session, seconds = qnn.compile_context(str(path), tmp, self.soc, what, profile)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)  # a failed compile leaves nothing in the cache
            raise
        bins = list(tmp.glob("*.bin"))
        info = {
            "soc": self.soc.name, "htp_arch": self.soc.htp_arch, "tokens": graph.layout.n_tokens,
            "sequences": graph.layout.n_seq, "outputs": list(graph.outputs), "onnx_bytes": onnx_bytes,
            "compile_s": round(seconds, 2), "context_bytes": sum(b.stat().st_size for b in bins),
            "nodes": len(graph.nodes), "feeds_bytes": sum(int(np.prod(f.shape)) * (4 if f.dtype == "i32" else 2) for f in lowered.feeds),
            "qnn": cache.qnn_version(),
        }  # fmt: skip
        ctx = cache.publish(tmp, self.soc, key, info)
        return session, dict(info, cached=False, path=str(ctx))


class HexagonExecutable(Executable):
    def __init__(self, graph, lowered, session, info: dict, profile: Path | None = None):
        self.graph = graph
        self.lowered = lowered
        self.session = session
        self.info = info
        self.profile = profile
        self.output_names = [o for o, _ in lowered.outputs.values()] + [w.name for w in lowered.writebacks]

    def cycles(self) -> list[int]:
        """HTP cycles of each run so far (with the backend's ``profile`` option), else []."""
        return qnn.cycles(self.profile) if self.profile is not None else []

    def bytes_per_run(self) -> int:
        """Bytes a run moves between the host and the HTP: every input and output."""
        outs = sum(int(np.prod(s)) * (4 if t == "i32" else 2) for t, s in self.lowered.value_infos.values())
        return self.info.get("feeds_bytes", 0) + outs

    def weight_bytes_read(self) -> int:
        """float16 bytes of the matrices a run reads whole (every product's; an embedding
        table is read one row a token and is not counted)."""
        shapes = {w.name: w.shape for n in self.graph.nodes for w in n.weights}
        return sum(
            2 * int(np.prod(shapes[k.split("|")[0]]))
            for k, how in self.lowered.weight_layout.items()
            if how == "transposed"
        )

    def feeds(self, state, inputs: StepInputs) -> dict[str, np.ndarray]:
        groups = self.graph.layout.groups
        slots = np.asarray(inputs.slots, np.int64)
        out = {}
        for f in self.lowered.feeds:
            if f.kind == "tokens":
                out[f.name] = np.ascontiguousarray(inputs.tokens, np.int32)
            elif f.kind == "positions":
                out[f.name] = np.ascontiguousarray(inputs.positions, np.int32)
            elif f.kind == "extra":
                a = np.asarray(inputs.extra[f.info["input"]])
                out[f.name] = a.astype(np.int32 if f.dtype == "i32" else np.float16)
            elif f.kind in ("rope_cos", "rope_sin"):
                cos, sin = rope_tables(np.asarray(inputs.positions), f.info["spec"])
                out[f.name] = cos if f.kind == "rope_cos" else sin
            elif f.kind in ("past_k", "past_v"):
                store = state.k if f.kind == "past_k" else state.v
                out[f.name] = np.ascontiguousarray(store[f.info["state"]][slots])
            elif f.kind == "mask":
                out[f.name] = kv_mask(state, inputs, groups, f.info["cells"], f.info["window"])
            elif f.kind == "mask_full":
                out[f.name] = full_mask(inputs, groups, f.info["causal"], f.info["window"])
            elif f.kind == "conv":
                out[f.name] = state.conv_state[f.info["state"]][slots].astype(np.float16)
        return out

    def run(self, state, inputs: StepInputs) -> dict[str, np.ndarray]:
        results = self.session.run(self.output_names, self.feeds(state, inputs))
        by_name = dict(zip(self.output_names, results, strict=True))
        groups = self.graph.layout.groups
        pending = {}
        for w in self.lowered.writebacks:
            pending.setdefault((w.kind.removeprefix("new_") if w.kind != "conv" else "conv", w.state), by_name[w.name])
        for (kind, i), value in pending.items():
            if kind == "k":
                v = pending[("v", i)]
                for s, (r0, n) in enumerate(groups):
                    state.kv(i, int(inputs.slots[s])).write(int(inputs.starts[s]), value[r0 : r0 + n], v[r0 : r0 + n])
            elif kind == "conv":
                for s in range(len(groups)):
                    state.conv_state[i][int(inputs.slots[s])] = value[s].astype(np.float32)
        return {
            name: np.asarray(by_name[onnx_name], np.int32 if dtype == "i32" else np.float32)
            for name, (onnx_name, dtype) in self.lowered.outputs.items()
        }


__all__ = ["HexagonBackend", "HexagonExecutable", "HexagonOptions", "target"]
