#!/usr/bin/env bash
# One H200 call's experiments, after `h200_vulkan.sh quick` installed everything (its LAB):
# edited per call; the commands and their output are quoted in the session's note.
# This call: the unit kernel with x as eight vectors (no private array), Q/K/V through it
# in one dispatch (CERA_VULKAN_UNIT_SEGMENTS=0: not), and the 32-element types' own unit
# decoders (row kernel "unit-all", the Q8_0 one written out) against "unit-auto".
set -uo pipefail
for rep in 1 2; do
  for m in /tmp/models/*.gguf; do
    for k in unit-auto unit-all; do
        echo -n "$k $(basename "$m"): "; CERA_VULKAN_ROW_KERNEL=$k timeout 60 python3 benchmarks/vulkan_decode_split.py "$m"
    done
    echo -n "unit-auto noseg $(basename "$m"): "; CERA_VULKAN_UNIT_SEGMENTS=0 CERA_VULKAN_ROW_KERNEL=unit-auto timeout 60 python3 benchmarks/vulkan_decode_split.py "$m"
  done
done
for m in /tmp/models/*.gguf; do
    for k in unit-auto unit-all; do
        echo -n "$k $(basename "$m"): "
        CERA_VULKAN_ROW_KERNEL=$k timeout 90 cera bench -m "$m" --device vulkan -p 0 -n 128 -r 3 2>&1 | grep tg128
    done
done
