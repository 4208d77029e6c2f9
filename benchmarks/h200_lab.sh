#!/usr/bin/env bash
# One H200 call's experiments, after `h200_vulkan.sh quick` (or `run`) installed
# everything (its LAB): edited per call; the commands and their output are quoted in the
# session's note.
# This call (ninth session, first): the kernels compiled without wgpu's runtime checks
# (CERA_VULKAN_SHADER_CHECKS=none, the new default: no index clamps, no loop counters)
# against wgpu's default (all), alternated, two rounds: the whole decoded token of each
# file, then pp512 of each file (the Qwens twice); then the 4x8 tile against 4x4 without the checks.
# Run (carry .gl, .whl, .dev/skel): mkdir -p /tmp/stage/skel && cp .dev/skel/* /tmp/stage/skel/ &&
#   LAB="bash benchmarks/h200_lab.sh" bash benchmarks/h200_vulkan.sh quick
# or inside the full run (carry .gl, .whl, .dev): LAB_EARLY=1 LAB="bash benchmarks/h200_lab.sh" ... run
set -uo pipefail
for rep in 1 2; do
    for m in /tmp/models/*.gguf; do
        for c in all none; do
            echo -n "checks $c: "; CERA_VULKAN_SHADER_CHECKS=$c timeout 60 python3 benchmarks/vulkan_decode_split.py "$m"
        done
    done
done
for rep in 1 2; do
    for m in /tmp/models/qwen*.gguf $([ $rep = 1 ] && echo /tmp/models/gemma*.gguf /tmp/models/smollm2*.gguf); do
        for c in all none; do
            echo -n "pp512 checks $c $(basename "$m"): "
            CERA_VULKAN_SHADER_CHECKS=$c timeout 90 cera bench -m "$m" --device vulkan -p 512 -n 0 -r 3 2>&1 | grep pp512
        done
    done
done
for m in /tmp/models/qwen2.5-coder-1.5b*.gguf /tmp/models/qwen2.5-coder-0.5b*.gguf; do
    for k in 4x4 4x8; do
        echo -n "matmul $k checks none $(basename "$m"): "
        CERA_VULKAN_MATMUL=$k timeout 90 cera bench -m "$m" --device vulkan -p 512 -n 0 -r 3 2>&1 | grep pp512
    done
done
