#!/usr/bin/env bash
# One H200 call's experiments, after `h200_vulkan.sh quick` (or `run`) installed
# everything (its LAB): edited per call; the commands and their output are quoted in the
# session's note.
# This call (eighth session): the unit variants on the real shapes, alternated, now with
# groups of fewer lanes than a subgroup (unit-auto-c16/-c8/-cfit: rows whose units leave
# a 32-lane subgroup's last step half idle), to re-plan compile.unit_plan; the whole
# token under unit-auto against unit-auto-cfit (two rounds, alternated); the split
# attention (flash-decoding) against the whole one at 2048 cells of context (where
# "lanes" splits); Gemma 3's rope norm through subgroups against the shared-memory tree.
# Run (carry .gl, .whl, .dev/skel): mkdir -p /tmp/stage/skel && cp .dev/skel/* /tmp/stage/skel/ &&
#   LAB="bash benchmarks/h200_lab.sh" bash benchmarks/h200_vulkan.sh quick
# or inside the full run (carry .gl, .whl, .dev): LAB_EARLY=1 LAB="bash benchmarks/h200_lab.sh" ... run
set -uo pipefail
timeout 150 python3 benchmarks/vulkan_matvec_sweep.py --norm \
    --variants unit-auto,unit-auto-c16,unit-auto-c8,unit-auto-cfit,unit-f1,unit-f4,unit-wg2 2>&1
for rep in 1 2; do
    for m in /tmp/models/*.gguf; do
        for k in unit-auto unit-auto-cfit; do
            echo -n "$k: "; CERA_VULKAN_ROW_KERNEL=$k timeout 60 python3 benchmarks/vulkan_decode_split.py "$m"
        done
    done
done
for m in /tmp/models/*.gguf; do
    for a in lanes-whole lanes; do
        echo -n "$a: "; CERA_VULKAN_ATTENTION=$a timeout 60 python3 benchmarks/vulkan_decode_split.py "$m" --context 2048 --tokens 32
    done
done
for tree in 1 0; do
    echo -n "rope tree=$tree: "; CERA_VULKAN_ROPE_TREE=$tree timeout 60 python3 benchmarks/vulkan_decode_split.py /tmp/models/gemma3-270m-q4_k_m.gguf
done
