"""What the Vulkan backend serves, as plain data (no imports: the plugin module reads it
without loading wgpu)."""

# GGML types with a WGSL decoder (wgsl.DQ8): products, row gathers and tiles read them
# in their GGUF block layout.
TENSOR_TYPES = (
    "F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
)  # fmt: skip

# The ops of cera.graph.ops with a kernel here: everything the dense decoder families use, the
# hybrid and mixture-of-experts families' short convolution, Mamba-2 scan, gated delta rule
# (their state in device buffers per layer) and experts, and the encoder-decoder families' (Whisper's)
# full convolution and cross-attention over a memory in device buffers per layer. That is
# every op of cera.graph.ops.
OPS = (
    "embedding", "linear", "rms_norm", "layer_norm", "rope", "attention", "attention_full", "unary", "glu",
    "add", "mul", "scale", "softcap", "softmax", "argmax", "top_k", "take", "concat", "rows", "seq_mean",
    "reshape", "slice", "copy", "conv1d_causal", "moe", "ssm_scan", "gated_delta_net", "conv1d", "cross_attention",
    "store_cross", "head_linear", "sigmoid_gate", "kda",
)  # fmt: skip

# KV cache precisions the attention kernels read
KV_TYPES = ("f16", "f32", "q8_0", "q4_0", "tq3", "tq2")
