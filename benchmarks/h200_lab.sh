#!/usr/bin/env bash
# One H200 call's experiments, after `h200_vulkan.sh quick` installed everything (its LAB):
# edited per call; the commands and their output are quoted in the session's note.
# This call (after the decode splits of ROW_KERNELS x ATTENTIONS: "unit-auto-x2", two
# units a pass, and attention "lanes8"): the tiled kernel written out
# (CERA_VULKAN_MATMUL=4x4u) against 4x4 on pp512.
set -uo pipefail
for m in /tmp/models/qwen2.5-coder-1.5b*.gguf /tmp/models/qwen2.5-coder-1.5b*.gguf /tmp/models/qwen2.5-coder-0.5b*.gguf; do
    for k in 4x4 4x4u; do
        echo -n "$k $(basename "$m"): "
        CERA_VULKAN_MATMUL=$k timeout 90 cera bench -m "$m" --device vulkan -p 512 -n 0 -r 3 2>&1 | grep pp512
    done
done
