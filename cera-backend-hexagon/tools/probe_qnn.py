"""What the two ways into QNN's HTP offer, measured on the machine at hand (the facts the
backend's README cites; run: ``CERA_HEXAGON_TARGET=simulator python tools/probe_qnn.py``).

1. QNN's C API through cffi, against the wheel's ``libQnnHtp.so``: load time and the
   provider's API versions. (Building a graph this way needs QNN's headers for the tensor
   and op-config structs, which the wheel does not ship.)
2. ONNX graphs through onnxruntime's QNN execution provider, CPU fallback off: which ONNX
   ops (float16 unless said) the HTP compiles, each one's compile time, and the results of
   two probes behind the backend's choices: quantized weights feeding a float16 MatMul, and
   an Add of two row picks of products (wrong on QNN 2.51's HTP; see lower.py's `_rows`).
"""

from __future__ import annotations

import time

import numpy as np


def c_api() -> None:
    import cffi
    import onnxruntime_qnn as oq

    ffi = cffi.FFI()
    ffi.cdef("""
    typedef struct { uint32_t major; uint32_t minor; uint32_t patch; } Qnn_Version_t;
    typedef struct { Qnn_Version_t coreApiVersion; Qnn_Version_t backendApiVersion; } Qnn_ApiVersion_t;
    typedef struct { uint32_t backendId; const char* providerName; Qnn_ApiVersion_t apiVersion; } QnnInterfaceHead_t;
    int QnnInterface_getProviders(const QnnInterfaceHead_t*** providerList, uint32_t* numProviders);
    """)
    t0 = time.perf_counter()
    lib = ffi.dlopen(oq.get_qnn_htp_path())
    loaded = time.perf_counter() - t0
    providers, n = ffi.new("QnnInterfaceHead_t***"), ffi.new("uint32_t*")
    rc = lib.QnnInterface_getProviders(providers, n)
    p = providers[0][0]
    core, backend = p.apiVersion.coreApiVersion, p.apiVersion.backendApiVersion
    print(f"C API: dlopen {loaded:.2f} s, rc {rc}, {n[0]} provider {ffi.string(p.providerName).decode()}: "
          f"core API {core.major}.{core.minor}.{core.patch}, HTP API {backend.major}.{backend.minor}.{backend.patch}")  # fmt: skip


def _session(model, soc):
    from cera_backend_hexagon import qnn

    return qnn._open(model.SerializeToString(), soc, None, "a probe")


def onnx_path() -> None:
    from onnx import TensorProto as TP
    from onnx import helper as h
    from onnx import numpy_helper as nh

    from cera_backend_hexagon.target import resolve_soc

    soc = resolve_soc()
    F = TP.FLOAT16
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((4, 64)) * 3).astype(np.float16)

    def probe(label, nodes, inputs, inits=(), opset=21, out=F):
        g = h.make_graph(nodes, label, [h.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                         [h.make_tensor_value_info("y", out, None)], list(inits))  # fmt: skip
        m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
        m.ir_version = 10
        t0 = time.perf_counter()
        try:
            _session(m, soc)
            print(f"  {label:44s} compiles ({time.perf_counter() - t0:.2f} s)")
        except Exception as e:  # noqa: BLE001 - the refusal is the finding
            print(f"  {label:44s} REFUSED: {str(e)[:120]}")

    i64 = lambda name, v: nh.from_array(np.asarray(v, np.int64), name)  # noqa: E731
    X = [("x", F, [4, 64])]
    print(f"ONNX through the QNN execution provider, {soc.name} v{soc.htp_arch}:")
    for op, attrs_, extra in (
        ("Relu", {}, []), ("Sigmoid", {}, []), ("Tanh", {}, []), ("Erf", {}, []), ("Gelu", {"approximate": "tanh"}, []),
        ("Softmax", {"axis": -1}, []), ("ArgMax", {"axis": -1, "keepdims": 0}, []),
    ):  # fmt: skip
        probe(f"{op}", [h.make_node(op, ["x", *extra], ["y"], **attrs_)], X, out=TP.INT64 if op == "ArgMax" else F)
    w = nh.from_array(np.ones(64, np.float16), "w")
    probe(
        "SimplifiedLayerNormalization",
        [h.make_node("SimplifiedLayerNormalization", ["x", "w"], ["y"], axis=-1, epsilon=1e-5)],
        X,
        [w],
    )
    probe("LayerNormalization", [h.make_node("LayerNormalization", ["x", "w"], ["y"], epsilon=1e-5)], X, [w])
    probe("TopK k=5", [h.make_node("TopK", ["x", "k"], ["v", "y"], axis=-1)], X, [i64("k", [5])], out=TP.INT64)
    probe("Gather (int32 ids) of a float16 table", [h.make_node("Gather", ["t", "x"], ["y"], axis=0)],
          [("x", TP.INT32, [4])], [nh.from_array(x, "t")])  # fmt: skip
    probe("Mod", [h.make_node("Mod", ["x", "x"], ["y"], fmod=1)], X)
    K, N = 256, 128
    for bits, qt in ((4, TP.INT4), (8, TP.INT8)):
        q = rng.integers(-8 if bits == 4 else -127, 8 if bits == 4 else 128, (K, N)).astype(np.int8)
        for label, scale, kw in (
            ("block_size=32", (K // 32, N), {"axis": 0, "block_size": 32}),
            ("per channel", (N,), {"axis": 1}),
        ):
            inits = [
                h.make_tensor("q", qt, [K, N], q.flatten().tolist()),
                nh.from_array(np.full(scale, 0.01, np.float16), "s"),
            ]
            probe(f"int{bits} weights ({label}) -> float16 MatMul",
                  [h.make_node("DequantizeLinear", ["q", "s"], ["W"], **kw), h.make_node("MatMul", ["x", "W"], ["y"])],
                  [("x", F, [1, K])], inits)  # fmt: skip
    # the row-pick bug: Add(Slice(a), Slice(a @ W2)) with a = x @ W1
    W1, W2 = (
        (rng.standard_normal((64, 64)) * 0.2).astype(np.float16),
        (rng.standard_normal((64, 64)) * 0.2).astype(np.float16),
    )
    nodes = [h.make_node("MatMul", ["x", "W1"], ["a"]), h.make_node("MatMul", ["a", "W2"], ["b"])]
    nodes += [h.make_node("Slice", [v, "s", "e", "ax"], [f"r{v}"]) for v in ("a", "b")]
    nodes += [h.make_node("Add", ["ra", "rb"], ["y"])]
    g = h.make_graph(nodes, "rows", [h.make_tensor_value_info("x", F, [6, 64])], [h.make_tensor_value_info("y", F, [1, 64])],
                     [nh.from_array(W1, "W1"), nh.from_array(W2, "W2"), i64("s", [5]), i64("e", [6]), i64("ax", [0])])  # fmt: skip
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 21)])
    m.ir_version = 10
    xs = rng.standard_normal((6, 64)).astype(np.float16)
    (y,) = _session(m, soc).run(None, {"x": xs})
    a = xs.astype(np.float32) @ W1.astype(np.float32)
    want = a[5] + (a @ W2.astype(np.float32))[5]
    print(
        f"  Add of two Slice row picks of products: max error {float(np.abs(y[0] - want).max()):.3g} on values up to {float(np.abs(want).max()):.3g}"
    )


if __name__ == "__main__":
    c_api()
    onnx_path()
