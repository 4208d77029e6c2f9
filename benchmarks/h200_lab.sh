#!/usr/bin/env bash
# One H200 call's experiments, after `h200_vulkan.sh quick` installed everything (its LAB):
# edited per call; the commands and their output are quoted in the session's note.
set -uo pipefail
Q15=/tmp/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
echo "== cera unit-f4 in-pass profile, Qwen 1.5B"
CERA_VULKAN_ROW_KERNEL=unit-f4 timeout 60 python3 benchmarks/vulkan_decode_split.py $Q15 --profile 40
echo "== sweep with the fused norm"
timeout 200 python3 benchmarks/vulkan_matvec_sweep.py --norm --variants workgroup-1pass,unit-f4,unit-f1
for _ in $(seq 60); do [ -f /tmp/llama.rc ] && break; sleep 5; done
echo "llama build rc=$(cat /tmp/llama.rc 2>/dev/null || echo unfinished)"; tail -3 /tmp/llama_build.log
for m in /tmp/models/*.gguf; do
    PYTHONPATH=/tmp/llama:/tmp/site timeout 150 python3 benchmarks/vulkan_llama_profile.py $m --tokens 32 --prompt 512
done
