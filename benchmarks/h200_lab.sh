#!/usr/bin/env bash
# One H200 call's experiments, after `h200_vulkan.sh quick` (or `run`) installed
# everything (its LAB): edited per call; the commands and their output are quoted in the
# session's note.
# Prepared for the next call: compile.unit_plan's thresholds were chosen while x sat in
# local memory in every unit kernel (the sixth session's finding); the sweep of the unit
# variants on the real shapes, with the norm fused as decode runs them, shows whether a
# workgroup per 1-2 features for long rows (the down products) and 1/2/4 features a
# subgroup by width still win; and "unit-auto-q6w" (Q6_K read as aligned words, no per-lane
# branch: Qwen2.5 1.5B's output and half its down products). Then the decode splits,
# alternated.
# Run (carry .gl, .whl, .dev/skel): mkdir -p /tmp/stage/skel && cp .dev/skel/* /tmp/stage/skel/ &&
#   LAB="bash benchmarks/h200_lab.sh" bash benchmarks/h200_vulkan.sh quick
set -uo pipefail
timeout 300 python3 benchmarks/vulkan_matvec_sweep.py --norm --check \
    --variants unit-auto,unit-auto-q6w,unit-f1,unit,unit-f4,unit-wg1,unit-wg2,unit-wg4 2>&1
for rep in 1 2; do
    for m in /tmp/models/*.gguf; do
        for k in unit-auto unit-auto-q6w unit-f1 unit-wg1; do
            echo -n "$k: "; CERA_VULKAN_ROW_KERNEL=$k timeout 60 python3 benchmarks/vulkan_decode_split.py "$m"
        done
    done
done
