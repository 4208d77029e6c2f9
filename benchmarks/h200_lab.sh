#!/usr/bin/env bash
# One H200 call's experiments, after `h200_vulkan.sh quick` (or `run`) installed
# everything (its LAB): edited per call; the commands and their output are quoted in the
# session's note.
# This call: a sandwich norm's add inside the unit kernel (the default) against apart
# (CERA_VULKAN_FUSE_SANDWICH=0), on Gemma 3's decode step, alternated; then where a
# token's time goes now (the in-pass profile) on Gemma 3 and Qwen2.5 1.5B.
set -uo pipefail
G=/tmp/models/gemma3-270m-q4_k_m.gguf
for rep in 1 2 3; do
    for f in 1 0; do
        echo -n "fuse_sandwich=$f: "; CERA_VULKAN_FUSE_SANDWICH=$f timeout 60 python3 benchmarks/vulkan_decode_split.py "$G"
    done
done
for m in "$G" /tmp/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf; do
    timeout 60 python3 benchmarks/vulkan_decode_split.py "$m" --profile 0
done
