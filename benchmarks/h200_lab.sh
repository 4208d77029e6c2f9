#!/usr/bin/env bash
# One H200 call's experiments, after `h200_vulkan.sh quick` (or `run`) installed
# everything (its LAB): edited per call; the commands and their output are quoted in the
# session's note.
# This call (eighth session, second): the whole token under unit-auto (the outputs in
# groups of fewer lanes than a subgroup, compile.UNIT_WIDE_LANES) against unit-auto-c32
# (whole subgroups everywhere: the plans before), two rounds, alternated; then the
# tiled kernels 4x4 (the default), 4x8 and 4x4-m32 on pp512 of the two Qwen2.5 files,
# alternated, two rounds (4x8 was last timed before the kernel's loops were written out).
# Run (carry .gl, .whl, .dev/skel): mkdir -p /tmp/stage/skel && cp .dev/skel/* /tmp/stage/skel/ &&
#   LAB="bash benchmarks/h200_lab.sh" bash benchmarks/h200_vulkan.sh quick
# or inside the full run (carry .gl, .whl, .dev): LAB_EARLY=1 LAB="bash benchmarks/h200_lab.sh" ... run
set -uo pipefail
for rep in 1 2; do
    for m in /tmp/models/*.gguf; do
        for k in unit-auto-c32 unit-auto; do
            echo -n "$k: "; CERA_VULKAN_ROW_KERNEL=$k timeout 60 python3 benchmarks/vulkan_decode_split.py "$m"
        done
    done
done
for rep in 1 2; do
    for m in /tmp/models/qwen2.5-coder-1.5b*.gguf /tmp/models/qwen2.5-coder-0.5b*.gguf; do
        for k in 4x4 4x8 4x4-m32; do
            echo -n "matmul $k $(basename "$m"): "
            CERA_VULKAN_MATMUL=$k timeout 90 cera bench -m "$m" --device vulkan -p 512 -n 0 -r 3 2>&1 | grep pp512
        done
    done
done
