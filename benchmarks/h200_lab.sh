#!/usr/bin/env bash
# One H200 call's experiments, after `h200_vulkan.sh quick` (or `run`) installed
# everything (its LAB): edited per call; the commands and their output are quoted in the
# session's note.
# This call: x read from memory by each group ("unit-auto-gx") against x copied to shared
# memory first ("unit-auto"), now that the unit kernel holds no private array, on three
# files' decode steps, alternated; Gemma 3's profile (its output product no longer
# computes the sandwich add: PRE_ADD_MAX_GROUPS).
set -uo pipefail
for rep in 1 2 3; do
    for m in /tmp/models/qwen2.5-coder-0.5b*.gguf /tmp/models/qwen2.5-coder-1.5b*.gguf /tmp/models/smollm2*.gguf; do
        for k in unit-auto unit-auto-gx; do
            echo -n "$k: "; CERA_VULKAN_ROW_KERNEL=$k timeout 60 python3 benchmarks/vulkan_decode_split.py "$m"
        done
    done
done
timeout 60 python3 benchmarks/vulkan_decode_split.py /tmp/models/gemma3-270m-q4_k_m.gguf --profile 0
