#!/usr/bin/env bash
# Build ik_llama.cpp (https://github.com/ikawrakow/ik_llama.cpp) as a CPU peer for
# bench_models.py --ik-llama: CPU only, -march=native (AVX-512 where the CPU has it),
# Release, only the llama-bench and llama-cli targets.
#
#   benchmarks/peers/build_ik_llama.sh DEST [GIT_DIR]
#
# DEST: the source tree (built in DEST/build). When DEST has no CMakeLists.txt, GIT_DIR
# (a clone or bare mirror of ik_llama.cpp) is exported into it at its HEAD first, without
# the files a build does not read (documents, vocabulary test files, the server).
# JOBS (default 2) sets the build's parallel jobs. Prints the two binaries' paths.
#
# The IQK flash-attention kernels are built for the f16, bf16 and q8_0 KV caches only
# (GGML_IQK_FA_ALL_QUANTS=OFF): the other cache types are not what a benchmark on the
# default f16 cache runs, and leaving them out saves most of the build time.
set -euo pipefail

dest=${1:?usage: build_ik_llama.sh DEST [GIT_DIR]}
git_dir=${2:-}
jobs=${JOBS:-2}

if [[ ! -f "$dest/CMakeLists.txt" ]]; then
    if [[ -z "$git_dir" ]]; then
        echo "error: $dest has no CMakeLists.txt; give the ik_llama.cpp git directory to export it from" >&2
        exit 2
    fi
    mkdir -p "$dest"
    git --git-dir="$git_dir" archive --format=tar HEAD -- . \
        ':(exclude)*.md' ':(exclude)models/*.gguf' ':(exclude)github-data' \
        ':(exclude)examples/server' \
        | tar -x -C "$dest"
    git --git-dir="$git_dir" rev-parse HEAD > "$dest/PEER_COMMIT"
fi

cmake -S "$dest" -B "$dest/build" \
    -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON \
    -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_SYCL=OFF -DGGML_RPC=OFF \
    -DGGML_IQK_FA_ALL_QUANTS=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_EXAMPLES=ON \
    -DBUILD_SHARED_LIBS=OFF
cmake --build "$dest/build" --config Release -j "$jobs" --target llama-bench llama-cli

for bin in llama-bench llama-cli; do
    path=$(find "$dest/build" -type f -name "$bin" -perm -u+x | head -n 1)
    [[ -n "$path" ]] || { echo "error: $bin was not built" >&2; exit 1; }
    echo "$path"
done
