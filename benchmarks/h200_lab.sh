#!/usr/bin/env bash
# One H200 call's experiments, after `h200_vulkan.sh quick` installed everything (its LAB):
# edited per call; the commands and their output are quoted in the session's note.
# This call: unit decoders of their own for the 32-element block types (row kernel
# "unit-all") against "unit-auto", on the whole decode step and on tg128 with logits.
set -uo pipefail
for m in /tmp/models/*.gguf; do
    for k in unit-auto unit-all; do
        echo -n "$k $(basename "$m"): "
        CERA_VULKAN_ROW_KERNEL=$k timeout 90 cera bench -m "$m" --device vulkan -p 0 -n 128 -r 3 2>&1 | grep tg128
    done
done
