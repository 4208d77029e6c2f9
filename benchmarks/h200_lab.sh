#!/usr/bin/env bash
# One H200 call's experiments, after `h200_vulkan.sh quick` installed everything (its LAB):
# edited per call; the commands and their output are quoted in the session's note.
set -uo pipefail
V=workgroup-1pass,unit-auto,unit-auto-gx
echo "== sweep, plain"; timeout 200 python3 benchmarks/vulkan_matvec_sweep.py --variants $V | grep -v "^    check"
echo "== sweep, with the fused norm"; timeout 200 python3 benchmarks/vulkan_matvec_sweep.py --norm --variants $V | grep -v "^    check"
for _ in $(seq 60); do [ -f /tmp/llama.rc ] && break; sleep 5; done
echo "llama build rc=$(cat /tmp/llama.rc 2>/dev/null || echo unfinished)"
MODELS=$(for m in /tmp/models/*.gguf; do printf -- "--model %s " "$m"; done)
(cd benchmarks && CERA_VULKAN_ROW_KERNEL=unit-auto timeout 200 python3 bench_models_one.py cera --device vulkan --tests pp512,tg128 --reps 3 $MODELS) 2>&1 | grep -E "tok/s|rror"
(cd benchmarks && PYTHONPATH=/tmp/llama:/tmp/site timeout 150 python3 bench_models_one.py llama.cpp --device vulkan --tests pp512,tg128 --reps 3 $MODELS) 2>&1 | grep -E "tok/s|rror|ggml_vulkan"
CERA_VULKAN_ROW_KERNEL=unit-auto timeout 90 cera bench -m /tmp/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --device vulkan -p 512 -n 4 -r 1 --profile 2>&1 | grep -v "^$" | head -40
