#!/usr/bin/env bash
# One H200 call's experiments, after `h200_vulkan.sh quick` (or `run`) installed
# everything (its LAB): edited per call; the commands and their output are quoted in the
# session's note.
# This call (seventh session): the unit variants on the real shapes again, now that the
# sweep alternates them (the sixth session's figures timed its first columns slow), to
# re-plan compile.unit_plan; then the split attention (flash-decoding) against the whole
# one, at 2048 cells of context (where "lanes" splits) and at 16 (lanes-split: what the
# combine dispatch costs where nothing needs splitting), alternated; and Gemma 3's rope
# norm through subgroups against the shared-memory tree (CERA_VULKAN_ROPE_TREE=1).
# Run (carry .gl, .whl, .dev/skel): mkdir -p /tmp/stage/skel && cp .dev/skel/* /tmp/stage/skel/ &&
#   LAB="bash benchmarks/h200_lab.sh" bash benchmarks/h200_vulkan.sh quick
# or inside the full run (carry .gl, .whl, .dev): LAB_EARLY=1 LAB="bash benchmarks/h200_lab.sh" ... run
set -uo pipefail
timeout 120 python3 benchmarks/vulkan_matvec_sweep.py --norm \
    --variants unit-auto,unit-f1,unit,unit-f4,unit-wg2,unit-wg4 2>&1
for rep in 1 2; do
    for m in /tmp/models/*.gguf; do
        for a in lanes-whole lanes; do
            echo -n "$a: "; CERA_VULKAN_ATTENTION=$a timeout 60 python3 benchmarks/vulkan_decode_split.py "$m" --context 2048 --tokens 32
        done
    done
done
for m in /tmp/models/*.gguf; do
    for a in lanes-whole lanes-split; do
        echo -n "$a: "; CERA_VULKAN_ATTENTION=$a timeout 60 python3 benchmarks/vulkan_decode_split.py "$m"
    done
done
for rep in 1 2; do
    for tree in 1 0; do
        echo -n "rope tree=$tree: "; CERA_VULKAN_ROPE_TREE=$tree timeout 60 python3 benchmarks/vulkan_decode_split.py /tmp/models/gemma3-270m-q4_k_m.gguf
    done
done
