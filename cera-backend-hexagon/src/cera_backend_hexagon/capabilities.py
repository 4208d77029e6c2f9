"""What the Hexagon backend declares (imported by the plugin module: keep it cheap)."""

# every GGUF type the gguf package decodes: converted to float16 when a graph is built
# (weights.py says how); the HTP graphs compute in float16
TENSOR_TYPES = (
    "F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL",
)  # fmt: skip

# the ops lower.py turns into ONNX nodes that QNN's HTP compiles (measured on the simulator
# by tests/backend_hexagon/test_conformance.py); moe, ssm_scan, conv1d and the
# cross-attention pair are not lowered
OPS = (
    "embedding", "linear", "rms_norm", "layer_norm", "rope", "attention", "attention_full", "unary", "glu", "add",
    "mul", "scale", "softcap", "softmax", "argmax", "top_k", "take", "concat", "rows", "seq_mean", "reshape",
    "slice", "copy", "conv1d_causal",
)  # fmt: skip

KV_TYPES = ("f16",)
