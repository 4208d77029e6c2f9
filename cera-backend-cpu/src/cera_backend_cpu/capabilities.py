"""What the CPU backend serves, as plain data.

Kept free of imports so that the plugin module (read by `cera plugins` and `cera --help`)
can declare the backend without loading numpy or the compiled kernels.
"""

# GGML tensor types with a dequantizer and a dot-product kernel in csrc/.
TENSOR_TYPES = (
    "F32",
    "F16",
    "BF16",
    "Q4_0",
    "Q4_1",
    "Q5_0",
    "Q5_1",
    "Q8_0",
    "Q2_K",
    "Q3_K",
    "Q4_K",
    "Q5_K",
    "Q6_K",
    "IQ4_NL",
    "IQ4_XS",
    "IQ3_S",
    "IQ3_XXS",
    "IQ2_S",
    "IQ2_XS",
    "IQ2_XXS",
    "IQ1_M",
    "IQ1_S",
)

# The ops of cera.graph.ops this backend implements: in C, or on the host between C segments
# (compile.py says which). A test checks this list against the op table.
OPS = (
    "embedding",
    "linear",
    "rms_norm",
    "layer_norm",
    "rope",
    "attention",
    "attention_full",
    "cross_attention",
    "store_cross",
    "unary",
    "glu",
    "add",
    "mul",
    "scale",
    "softcap",
    "softmax",
    "argmax",
    "top_k",
    "take",
    "concat",
    "rows",
    "seq_mean",
    "reshape",
    "slice",
    "copy",
    "conv1d_causal",
    "conv1d",
    "ssm_scan",
    "gated_delta_net",
    "moe",
    "head_linear",  # on the host (the op table's numpy reference), as sigmoid_gate and kda
    "sigmoid_gate",
    "kda",
)

# Names accepted by CERA_CPU_VARIANT (and CpuBackend(variant=...)), worst to best.
VARIANTS = ("scalar", "avx2", "avx512", "avx512vnni", "neon")
