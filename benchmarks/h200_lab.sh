#!/usr/bin/env bash
# One H200 call's experiments, after `h200_vulkan.sh quick` installed everything (its LAB):
# edited per call; the commands and their output are quoted in the session's note.
set -uo pipefail
V=workgroup-1pass,unit-auto,unit-f1,unit,unit-f4,unit-wg1,unit-wg2,unit-wg4
echo "== sweep, plain"; timeout 200 python3 benchmarks/vulkan_matvec_sweep.py --variants $V
echo "== sweep, with the fused norm"; timeout 200 python3 benchmarks/vulkan_matvec_sweep.py --norm --variants $V
for _ in $(seq 60); do [ -f /tmp/llama.rc ] && break; sleep 5; done
echo "llama build rc=$(cat /tmp/llama.rc 2>/dev/null || echo unfinished)"
for m in /tmp/models/qwen2.5-coder-1.5b*.gguf /tmp/models/gemma3*.gguf; do
    PYTHONPATH=/tmp/llama:/tmp/site timeout 150 python3 benchmarks/vulkan_llama_profile.py $m --tokens 32
done
