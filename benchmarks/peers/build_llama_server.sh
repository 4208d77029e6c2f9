#!/usr/bin/env bash
# Build llama.cpp's llama-server (CPU, this machine's instruction set) from the llama.cpp
# that llama-cpp-python 0.3.36 vendors, for benchmarks/bench_serve.py --llama-server.
#   benchmarks/peers/build_llama_server.sh SRC BUILD_DIR
# SRC: llama-cpp-python's sdist, unpacked (pip download llama-cpp-python==0.3.36 --no-binary :all: --no-deps)
# BUILD_DIR: where the build goes; the binary is BUILD_DIR/bin/llama-server.
set -euo pipefail
src=${1:?usage: build_llama_server.sh LLAMA_CPP_PYTHON_SRC BUILD_DIR}
build=${2:?usage: build_llama_server.sh LLAMA_CPP_PYTHON_SRC BUILD_DIR}
llama="$src/vendor/llama.cpp"
[ -f "$llama/CMakeLists.txt" ] || { echo "no llama.cpp sources at $llama" >&2; exit 2; }
cmake -S "$llama" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON
cmake --build "$build" --target llama-server -j "${JOBS:-$(nproc)}"
"$build/bin/llama-server" --version
