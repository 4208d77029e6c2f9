#!/usr/bin/env bash
# cera's Vulkan backend and llama.cpp's Vulkan build side by side on a GPU machine that
# reaches no network and takes 64 MiB of files a run (the tracked tree, ~27 MB, included).
# What does not fit one run is staged over several runs while the machine stays up:
#
#   stage DIR...   copy carried folders' files to /tmp/stage, nothing more (the build of
#                  llama-cpp-python with trixie's glslc and Vulkan headers from .dev starts
#                  in the background at the next `quick` or `run`)
#   quick          install, rebuild the files' layouts, then (PROFILE_N set) the decode
#                  split of each with its per-dispatch profile (vulkan_decode_split.py
#                  --profile) under BENCH_KERNEL, the splits under each of ROW_KERNELS x
#                  ATTENTIONS, and the command in $LAB: a short run for one kernel change
#   run            everything else: install, reassemble the real SmolLM2 file
#                  (chunks smol.part*), `cera run --device vulkan` on it, the Vulkan tests
#                  (conformance, greedy vs the CPU on the real file), then cera and llama.cpp
#                  side by side on the real file and on the other files' layouts with random
#                  weights (gguf_skeleton.py), each engine in its own process; MATMULS
#                  (e.g. "4x8 4x4") compares the tiled kernels on pp512 first; LAB (a
#                  command, e.g. "bash benchmarks/experiments/vulkan_variants.sh tiled")
#                  runs after the decode splits; REPS (default 3) the timed runs of each
#                  test per engine; TESTS (default pp512,tg128) the tests, e.g.
#                  pp512,tg128,tg128@d2048; LAB_EARLY=1 runs LAB while llama.cpp builds
#   -h, --help     this text
#
# Not yet fair for prompts: llama.cpp's first process on a fresh machine runs before the
# NVIDIA driver has cached its shaders, well below its warm speed; warm both engines in an
# untimed process first (benchmarks/README.md, "Vulkan").
#
# Carried folders (all ignored by git; see benchmarks/README.md, "Vulkan"):
#   .gl/    libvulkan1 and friends
#   .whl/   wgpu, rendercanvas, sniffio, cffi, pycparser, gguf, llguidance, diskcache wheels
#           for cp312 (diskcache: llama-cpp-python imports it)
#   .dev/   debs/ (glslc, libshaderc1, libvulkan-dev, spirv-headers from trixie),
#           lcp.tar.xz (the llama-cpp-python sdist without its vocab files, docs, git),
#           skel/*.skel (gguf_skeleton.py skeletons of the real files)
#   .m1/ .m2/ ...  chunks of the real SmolLM2 file (split -b), and its .verified.json
set -uo pipefail
case "${1:-}" in -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0;; esac
MODE=${1:-run}
shift || true
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/stage
REPO=$(pwd)
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }

start_llama_build() {  # needs libvulkan1 unpacked (.gl) for the link
    [ -f /tmp/stage/lcp.tar.xz ] && [ ! -e /tmp/llama.started ] || return 0
    touch /tmp/llama.started
    mkdir -p /opt/vk && for f in /tmp/stage/debs/*.deb; do dpkg -x "$f" /opt/vk; done
    setsid bash -c '
        export PATH=/opt/vk/usr/bin:$PATH LD_LIBRARY_PATH=/opt/vk/usr/lib/x86_64-linux-gnu
        rm -rf /tmp/llama_cpp_python-0.3.36; cd /tmp && tar xJf /tmp/stage/lcp.tar.xz && cd llama_cpp_python-0.3.36 &&
        CMAKE_ARGS="-DGGML_VULKAN=ON -DLLAVA_BUILD=OFF -DLLAMA_BUILD_MTMD=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON \
          -DVulkan_INCLUDE_DIR=/opt/vk/usr/include -DVulkan_LIBRARY=/usr/lib/x86_64-linux-gnu/libvulkan.so.1 \
          -DVulkan_GLSLC_EXECUTABLE=/opt/vk/usr/bin/glslc" CMAKE_BUILD_PARALLEL_LEVEL=16 \
        python3 -m pip install --no-index --no-deps --no-build-isolation --target /tmp/llama -v . >/tmp/llama_build.log 2>&1
        echo $? > /tmp/llama.rc' </dev/null >/dev/null 2>&1 &
}

if [ "$MODE" = stage ]; then
    for d in "$@"; do cp -r "$d"/. /tmp/stage/; done
    ls -la /tmp/stage
    stamp "staged"
    exit 0
fi

exec > >(tee -a "$OUT/log.txt") 2>&1
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
[ "$(cat /tmp/llama.rc 2>/dev/null)" = 0 ] || rm -f /tmp/llama.started /tmp/llama.rc
start_llama_build  # in the background, from the first seconds
if [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
export XDG_RUNTIME_DIR=/tmp PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
# quick: no CPU backend (its C build takes most of a minute there) unless CPU=1; EXTRA:
# more distributions to install (e.g. "-e ./cera-audio/whisper")
CPU_PKG=$([ "$MODE" = quick ] && [ -z "${CPU:-}" ] || echo "-e ./cera-backend-cpu")
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e ./cera-core $CPU_PKG -e ./cera-backend-vulkan \
    $(for d in cera-models/*/; do [ -f "$d/pyproject.toml" ] && printf -- "-e ./%s " "$d"; done) -e ./cera-cli ${EXTRA:-} >/tmp/pip.log 2>&1 || { tail -30 /tmp/pip.log; exit 1; }
stamp "installed"

# the real SmolLM2 file, where cera's bundle cache looks for it (the stamp is re-checked
# by SHA-256, so a rebuilt file is accepted only if it is the published one)
export CERA_CACHE_DIR=/tmp/cera-cache
SMOL=$CERA_CACHE_DIR/bundles/smollm2-135m-instruct-q4_1
mkdir -p "$SMOL" /tmp/models
REAL=0
if ls /tmp/stage/smol.part* >/dev/null 2>&1; then
    REAL=1
    cat /tmp/stage/smol.part* > "$SMOL/SmolLM2-135M-Instruct.Q4_1.gguf"
    cp /tmp/stage/verified.json "$SMOL/.verified.json"
    sha256sum "$SMOL/SmolLM2-135M-Instruct.Q4_1.gguf"
else  # no chunks carried this time: its layout with random weights, like the others
    python3 benchmarks/gguf_skeleton.py synth /tmp/stage/skel/smollm2-135m-instruct-q4_1.skel "$SMOL/SmolLM2-135M-Instruct.Q4_1.gguf" >/dev/null
fi
ln -sf "$SMOL/SmolLM2-135M-Instruct.Q4_1.gguf" /tmp/models/smollm2-135m-instruct-q4_1.gguf
pids=()
for s in /tmp/stage/skel/*.skel; do
    n=$(basename "$s" .skel)
    [ "$n" = smollm2-135m-instruct-q4_1 ] && continue
    python3 benchmarks/gguf_skeleton.py synth "$s" "/tmp/models/$n.gguf" >/dev/null &
    pids+=($!)
done

if [ "$MODE" = quick ]; then
    wait "${pids[@]}"
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader; echo "commit ${COMMIT:-unknown}"
    [ -n "${PROFILE_N:-}" ] && for m in /tmp/models/*.gguf; do
        CERA_VULKAN_ROW_KERNEL=${BENCH_KERNEL:-} timeout 60 python3 benchmarks/vulkan_decode_split.py "$m" --profile $PROFILE_N
    done
    for k in ${ROW_KERNELS:-}; do for a in ${ATTENTIONS:-lanes}; do for m in /tmp/models/*.gguf; do
        echo -n "$k $a: "; CERA_VULKAN_ROW_KERNEL=$k CERA_VULKAN_ATTENTION=$a timeout 60 python3 benchmarks/vulkan_decode_split.py "$m"
    done; done; done
    [ -n "${LAB:-}" ] && bash -c "$LAB"
    stamp "done"
    exit 0
fi
{
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
python3 -c "
from cera_backend_vulkan.backend import VulkanBackend
b = VulkanBackend(); print(b.probe().device); print('subgroup size', b.ctx.subgroup_size)"
# the copied tree may carry an older .git than the files: the files that differ from
# that commit name the code that ran
echo "commit ${COMMIT:-unknown}; files differing from it: $(git status --porcelain 2>/dev/null | wc -l)"
git status --porcelain 2>/dev/null | head -20
} 2>&1

[ $REAL = 1 ] && {
P="Why is the sky blue? Answer in two sentences."
for dev in vulkan cpu; do
    echo "== cera run --device $dev --temp 0 -n 48"
    timeout 120 cera run -m smollm2-135m-instruct-q4_1 --device $dev --temp 0 -n 48 -v -p "$P"
done
echo "== cera run --device vulkan (sampling, seed 7)"
timeout 120 cera run -m smollm2-135m-instruct-q4_1 --device vulkan --seed 7 -p "$P"
} 2>&1
stamp "cera run done"

# the greedy tests need the real files: SmolLM2 when its chunks came, never Gemma 3 there
timeout ${TEST_TIMEOUT:-300} python3 -m pytest -q -n 8 -p no:cacheprovider -o addopts="" tests/backend_vulkan -rs \
    --deselect tests/backend_vulkan/test_greedy.py::test_greedy_continuation_gemma3 \
    $([ $REAL = 1 ] || echo --ignore=tests/backend_vulkan/test_greedy.py) 2>&1 | tail -25
stamp "tests done"
wait "${pids[@]}"

MODELS=$(for m in /tmp/models/*.gguf; do printf -- "--model %s " "$m"; done)
# the row-kernel variants on the real product shapes, checked (SKIP_SWEEP=1: not): GPU work,
# while llama.cpp may still be building
# LAB_EARLY=1: the experiments in LAB here, while llama.cpp builds (GPU timings; the host
# is busy compiling, alike for the variants they alternate)
if [ -n "${LAB_EARLY:-}" ] && [ -n "${LAB:-}" ]; then bash -c "$LAB"; stamp "lab done"; fi
if [ -z "${SKIP_SWEEP:-}" ]; then
    timeout 240 python3 benchmarks/experiments/vulkan_matvec_sweep.py --check 2>&1
    stamp "sweep done"
fi
# timings want the CPU to themselves (recording a pass is host work): the build first
for _ in $(seq 60); do [ -f /tmp/llama.rc ] && break; sleep 5; done
stamp "llama build rc=$(cat /tmp/llama.rc 2>/dev/null || echo unfinished)"
tail -3 /tmp/llama_build.log 2>/dev/null
# the decode split of every model under each row kernel named in ROW_KERNELS (the first is
# the default's), then both engines side by side, cera under BENCH_KERNEL (default: its own)
for k in ${ROW_KERNELS:-}; do
    for m in /tmp/models/*.gguf; do
        echo -n "$k: "; CERA_VULKAN_ROW_KERNEL=$k timeout 60 python3 benchmarks/vulkan_decode_split.py "$m"
    done
done 2>&1 | tee /tmp/split.txt
if [ -n "${ROW_KERNELS:-}" ] && [ -z "${BENCH_KERNEL:-}" ]; then  # the fastest over the four files' decode steps
    BENCH_KERNEL=$(python3 -c "
import re, collections
t = collections.defaultdict(float); n = collections.Counter()
for line in open('/tmp/split.txt'):
    m = re.match(r'(\S+): .*total ([0-9.]+)', line)
    if m: t[m[1]] += float(m[2]); n[m[1]] += 1
full = [k for k in t if n[k] == max(n.values())]
print(min(full, key=t.get) if full else '')")
    echo "BENCH_KERNEL=$BENCH_KERNEL (the least decode time summed over the files)"
fi
[ -z "${ROW_KERNELS:-}" ] && for m in /tmp/models/*.gguf; do timeout 60 python3 benchmarks/vulkan_decode_split.py "$m"; done 2>&1
stamp "decode split done"
# the experiments in LAB (e.g. benchmarks/experiments/vulkan_variants.sh), before the timed tables
[ -n "${LAB:-}" ] && [ -z "${LAB_EARLY:-}" ] && bash -c "$LAB"
# the tiled (prefill) kernels named in MATMULS on the two largest files' pp512, alternated;
# BENCH_MATMUL (unless set): the least time summed, for both engines' table below
for k in ${MATMULS:-}; do
    for m in /tmp/models/qwen2.5-coder-1.5b*.gguf /tmp/models/qwen2.5-coder-0.5b*.gguf; do
        echo -n "matmul $k $(basename "$m"): "
        CERA_VULKAN_MATMUL=$k CERA_VULKAN_ROW_KERNEL=${BENCH_KERNEL:-} timeout 90 cera bench -m "$m" --device vulkan -p 512 -n 0 -r 3 2>&1 | grep pp512
    done
done 2>&1 | tee /tmp/matmul.txt
if [ -n "${MATMULS:-}" ] && [ -z "${BENCH_MATMUL:-}" ]; then
    BENCH_MATMUL=$(python3 -c "
import re, collections
t = collections.defaultdict(float)
for line in open('/tmp/matmul.txt'):
    m = re.match(r'matmul (\S+) .*pp512\s+([0-9.]+)', line)
    if m: t[m[1]] += 512 / float(m[2])
print(min(t, key=t.get) if t else '')")
    echo "BENCH_MATMUL=$BENCH_MATMUL (the least pp512 time summed over the two files)"
fi
export CERA_VULKAN_MATMUL=${BENCH_MATMUL:-}
(cd benchmarks && CERA_VULKAN_ROW_KERNEL=${BENCH_KERNEL:-} timeout 200 python3 bench_models_one.py cera --device vulkan --tests ${TESTS:-pp512,tg128} --reps ${REPS:-3} $MODELS) 2>&1
if [ "$(cat /tmp/llama.rc 2>/dev/null)" = 0 ]; then
    # with llama.cpp's Vulkan device line (matrix cores / coopmat: its prompt speed depends on them)
    (cd benchmarks && PYTHONPATH=/tmp/llama:/tmp/site timeout 150 python3 bench_models_one.py llama.cpp --device vulkan --tests ${TESTS:-pp512,tg128} --reps ${REPS:-3} $MODELS) 2>&1 | grep -E "tok/s|rror|ggml_vulkan|coopmat|matrix cores"
fi
# the per-kernel profile of one decoded token (timestamp queries; each dispatch in a pass of its own)
# (and of a prompt pass of 512 tokens)
CERA_VULKAN_ROW_KERNEL=${BENCH_KERNEL:-} timeout 90 cera bench -m /tmp/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --device vulkan -p 512 -n 4 -r 1 --profile 2>&1 | grep -v "^$"
stamp "done"
