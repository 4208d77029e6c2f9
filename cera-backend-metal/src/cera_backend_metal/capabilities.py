"""What the Metal backend serves, as plain data (no imports: the plugin module reads it
without loading MLX)."""

# GGML type -> (how it runs, whether the values are the file's exactly). README.md has the
# table with the memory each takes; blocks.py the exact mappings.
TYPES = {
    "F32": ("MLX float32 array", "exact"),
    "F16": ("MLX float16 array; activations rounded to f16 for its products (as llama.cpp)", "exact"),
    "BF16": ("MLX bfloat16 array; activations rounded to bf16 for its products (as llama.cpp)", "exact"),
    "Q4_0": ("MLX affine 4-bit, groups of 32 (scale d, bias -8d)", "exact"),
    "Q4_1": ("MLX affine 4-bit, groups of 32 (scale d, bias m)", "exact"),
    "Q5_0": ("MLX affine 5-bit, groups of 32 (scale d, bias -16d)", "exact"),
    "Q5_1": ("MLX affine 5-bit, groups of 32 (scale d, bias m)", "exact"),
    "Q8_0": ("MLX affine 8-bit, groups of 32 (q + 128, scale d, bias -128d)", "exact"),
    "Q4_K": ("MLX affine 4-bit, groups of 32 (sub-block scale and minimum folded in)", "exact"),
    "Q5_K": ("MLX affine 5-bit, groups of 32 (sub-block scale and minimum folded in)", "exact"),
    # groups of 16, or values from a table: no MLX affine layout holds them
    "Q6_K": ("dequantized to float32 at load (logged)", "exact"),
    "Q2_K": ("dequantized to float32 at load (logged)", "exact"),
    "Q3_K": ("dequantized to float32 at load (logged)", "exact"),
    "IQ4_NL": ("dequantized to float32 at load (logged)", "exact"),
    "IQ4_XS": ("dequantized to float32 at load (logged)", "exact"),
}

TENSOR_TYPES = tuple(TYPES)
QUANTIZED = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K")
DEQUANTIZED = ("Q6_K", "Q2_K", "Q3_K", "IQ4_NL", "IQ4_XS")

# Every op of cera.graph.ops (a test checks this list against the op table).
OPS = (
    "embedding", "linear", "rms_norm", "layer_norm", "rope", "attention", "attention_full", "unary", "glu",
    "add", "mul", "scale", "softcap", "softmax", "argmax", "top_k", "take", "concat", "rows", "seq_mean",
    "reshape", "slice", "copy", "conv1d_causal", "moe", "ssm_scan", "gated_delta_net", "conv1d", "cross_attention", "store_cross",
    "head_linear", "sigmoid_gate", "kda",
)  # fmt: skip

# KV cache precisions the attention reads
KV_TYPES = ("f16", "f32", "q8_0", "q4_0")
