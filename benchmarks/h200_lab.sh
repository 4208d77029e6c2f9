#!/usr/bin/env bash
# One H200 call's experiments, after `h200_vulkan.sh quick` installed everything (its LAB):
# edited per call; the commands and their output are quoted in the session's note.
set -uo pipefail
MODELS=$(for m in /tmp/models/*.gguf; do printf -- "--model %s " "$m"; done)
(cd benchmarks && timeout 120 python3 bench_models_one.py cera --device vulkan --tests tg128 --reps 3 $MODELS) 2>&1 | grep -E "tok/s|rror"
