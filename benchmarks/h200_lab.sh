#!/usr/bin/env bash
# One H200 call's experiments, after `h200_vulkan.sh quick` installed everything (its LAB):
# edited per call; the commands and their output are quoted in the session's note.
# Prepared for the next call: the tiled kernels' 32-row tiles (wgsl.matmul tile_rows,
# CERA_VULKAN_MATMUL=4x4-m32 / auto-m32, not measured yet) on the prompt pass, alternated.
set -uo pipefail
for m in /tmp/models/qwen2.5-coder-1.5b*.gguf /tmp/models/qwen2.5-coder-0.5b*.gguf; do
    for k in 4x4 auto-m32 4x4-m32 4x4 auto-m32 4x4-m32; do
        echo -n "$k $(basename "$m"): "
        CERA_VULKAN_MATMUL=$k timeout 90 cera bench -m "$m" --device vulkan -p 512 -n 0 -r 3 2>&1 | grep pp512
    done
done
CERA_VULKAN_MATMUL=auto-m32 timeout 90 cera bench -m /tmp/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \
    --device vulkan -p 512 -n 4 -r 1 --profile 2>&1 | grep -v "^$" | tail -12
