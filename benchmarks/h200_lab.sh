#!/usr/bin/env bash
# One H200 call's experiments, after `h200_vulkan.sh quick` installed everything (its LAB):
# edited per call; the commands and their output are quoted in the session's note.
# This call: the tiled kernel written out (CERA_VULKAN_MATMUL=4x4u: x's loads by
# component, the depth loop 8 steps a pass) against 4x4 on pp512, and decode attention
# "lanes8" against "lanes" on tg128 (the decode splits ran before, under ATTENTIONS).
set -uo pipefail
for m in /tmp/models/qwen2.5-coder-1.5b*.gguf /tmp/models/qwen2.5-coder-0.5b*.gguf; do
    for k in 4x4 4x4u 4x4 4x4u; do
        echo -n "$k $(basename "$m"): "
        CERA_VULKAN_MATMUL=$k timeout 90 cera bench -m "$m" --device vulkan -p 512 -n 0 -r 3 2>&1 | grep pp512
    done
done
for m in /tmp/models/*.gguf; do
    for a in lanes lanes8; do
        echo -n "$a $(basename "$m"): "
        CERA_VULKAN_ATTENTION=$a timeout 90 cera bench -m "$m" --device vulkan -p 0 -n 128 -r 3 2>&1 | grep tg128
    done
done
CERA_VULKAN_MATMUL=4x4u timeout 90 cera bench -m /tmp/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \
    --device vulkan -p 512 -n 4 -r 1 --profile 2>&1 | grep -A12 "prompt pass"
