#!/usr/bin/env bash
# One H200 call's experiments, after `h200_vulkan.sh quick` installed everything (its LAB):
# edited per call; the commands and their output are quoted in the session's note.
set -uo pipefail
echo "== sweep, plain (unit-auto-ro: x from a read-only copy of the arena)"
timeout 200 python3 benchmarks/vulkan_matvec_sweep.py --variants workgroup-1pass,unit-auto,unit-auto-gx,unit-auto-ro | grep -v "^    check"
for m in /tmp/models/qwen2.5-coder-1.5b*.gguf /tmp/models/qwen2.5-coder-0.5b*.gguf /tmp/models/gemma3*.gguf; do
    for mm in plain prefetch plain prefetch; do
        echo -n "$mm $(basename $m): "
        CERA_VULKAN_MATMUL=$mm CERA_VULKAN_ROW_KERNEL=unit-auto timeout 90 cera bench -m $m --device vulkan -p 512 -n 0 -r 3 2>&1 | grep pp512
    done
done
