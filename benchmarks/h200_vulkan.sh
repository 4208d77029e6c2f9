#!/usr/bin/env bash
# The Vulkan backend on a lent GPU machine that reaches nothing (the workplace's device
# tool): its tests, then cera and llama.cpp's Vulkan build side by side on the real files'
# layouts. Run from the repository root there, with these carried (all ignored by git):
#   .gl/    libvulkan1 and friends (Debian .debs; see the device tool's README)
#   .whl/   wgpu, rendercanvas, sniffio, gguf wheels for cp312
#   .dev/   debs/ (glslc, libshaderc1, libvulkan-dev, spirv-headers), lcp.tar.xz (the
#           llama-cpp-python 0.3.36 sdist without its test models, docs and git history),
#           skel/*.skel (benchmarks/gguf_skeleton.py skeleton of each real file)
# Modes: "test" (tests and cera's own figures), "full" (also builds llama-cpp-python with
# -DGGML_VULKAN=ON and runs bench_models.py --device vulkan), "llama" (only the build and
# bench_models.py).
set -uo pipefail
MODE=${1:-full}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
REPO=$(pwd)
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }

for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
# Vulkan headers and glslc for llama.cpp's build: Debian trixie's (1.4.309, shaderc 2025.2:
# cooperative-matrix shaders); bookworm's glslc where trixie's does not run
mkdir -p /opt/vk && for f in .dev/debs/*.deb; do dpkg -x "$f" /opt/vk; done
export PATH=/opt/vk/usr/bin:$PATH
export LD_LIBRARY_PATH=/opt/vk/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
if ! glslc --version >/dev/null 2>&1; then
    for f in .dev/debs-bookworm/*.deb; do dpkg -x "$f" /opt/vk; done
fi
glslc --version 2>&1 | head -1
if [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
export XDG_RUNTIME_DIR=/tmp PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e ./cera-core -e ./cera-backend-vulkan \
    $(for d in cera-models/*/; do [ -f "$d/pyproject.toml" ] && printf -- "-e ./%s " "$d"; done) -e ./cera-cli >"$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 1; }
stamp "installed"

if [ "$MODE" != test ]; then
    # llama.cpp's Vulkan build, in the background while the tests run
    (cd /tmp && tar xJf "$REPO/.dev/lcp.tar.xz" && cd llama_cpp_python-0.3.36 && \
     CMAKE_ARGS="-DGGML_VULKAN=ON -DLLAVA_BUILD=OFF -DLLAMA_BUILD_MTMD=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON \
       -DVulkan_INCLUDE_DIR=/opt/vk/usr/include -DVulkan_LIBRARY=/usr/lib/x86_64-linux-gnu/libvulkan.so.1 \
       -DVulkan_GLSLC_EXECUTABLE=/opt/vk/usr/bin/glslc" CMAKE_BUILD_PARALLEL_LEVEL=16 \
     python3 -m pip install --no-index --no-deps --no-build-isolation --target /tmp/llama -v . ) >"$OUT/llama_build.log" 2>&1 &
    BUILD=$!
fi

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
python3 - <<'EOF' | tee -a "$OUT/gpu.txt"
from cera_backend_vulkan.backend import VulkanBackend
b = VulkanBackend()
print(b.probe().device)
print("subgroup size", b.ctx.subgroup_size, "max binding", b.ctx.max_binding)
EOF

if [ "$MODE" = llama ]; then SKIP_TESTS=1; fi
mkdir -p /tmp/models
pids=()
for s in .dev/skel/${MODELS:-*}.skel; do
    python3 benchmarks/gguf_skeleton.py synth "$s" "/tmp/models/$(basename "$s" .skel).gguf" >/dev/null &
    pids+=($!)
done
wait "${pids[@]}"
stamp "models written"

[ -z "${SKIP_TESTS:-}" ] && python3 -m pytest -q -p no:cacheprovider tests/backend_vulkan/test_conformance.py 2>&1 | tail -15 | tee "$OUT/tests.txt"
stamp "tests done"

for m in /tmp/models/*.gguf; do
    [ "$MODE" = llama ] && break
    cera bench -m "$m" --device vulkan -p 512 -n 128 -r ${REPS:-3} --profile 2>&1 | grep -v "^$" | tee -a "$OUT/cera_bench.txt"
done
[ "$MODE" != llama ] && for m in /tmp/models/*.gguf; do python3 benchmarks/vulkan_decode_split.py "$m" | tee -a "$OUT/decode_split.txt"; done
stamp "cera benches done"
# the row-kernel variants on the real product shapes (SKIP_SWEEP=1: not), then, for the
# variants named in ROW_KERNELS (e.g. ROW_KERNELS="workgroup subgroup-blk16"), the decode
# split of every model under each
if [ "$MODE" != llama ] && [ -z "${SKIP_SWEEP:-}" ]; then
    python3 benchmarks/vulkan_matvec_sweep.py --check --json "$OUT/matvec_sweep.json" 2>&1 | tee "$OUT/matvec_sweep.txt"
    for k in ${ROW_KERNELS:-}; do
        for m in /tmp/models/*.gguf; do
            echo -n "$k: " | tee -a "$OUT/decode_split_kernels.txt"
            CERA_VULKAN_ROW_KERNEL=$k python3 benchmarks/vulkan_decode_split.py "$m" | tee -a "$OUT/decode_split_kernels.txt"
        done
    done
    stamp "sweep done"
fi

if [ "$MODE" != test ]; then
    wait "$BUILD"; rc=$?
    stamp "llama build rc=$rc"
    tail -5 "$OUT/llama_build.log"
    export PYTHONPATH=/tmp/llama:/tmp/site
    cd benchmarks && python3 bench_models.py --device vulkan --tests pp512,tg128 --reps 3 \
        $(for m in /tmp/models/*.gguf; do echo --model "$m"; done) --json "$OUT/bench_models.json" 2>&1 | tee "$OUT/bench_models.txt"
    stamp "bench_models done"
fi
