#!/usr/bin/env bash
# cera's Vulkan backend against llama.cpp's Vulkan build on any GPU machine that reaches no
# network, both warmed, in alternating processes. Everything it needs is one folder made by
# gpu_vulkan_stage.sh (carried to the machine); the cera code it runs is the folder's
# cera.tar.xz (its commit in COMMIT), unpacked beside it:
#
#   S=.gpu-stage; mkdir -p /tmp/cera && tar xJf $S/cera.tar.xz -C /tmp/cera &&
#   STAGE=$PWD/$S bash /tmp/cera/benchmarks/gpu_vulkan.sh [MODE]
#
# MODE (default `bench`):
#   prepare   unpack the loaders, install the wheels and cera, start llama-cpp-python's
#             Vulkan build in the background (setsid: it outlives the command while the
#             machine stays up), rebuild the four files' layouts with random weights
#   bench     prepare; print both engines' device lines; one untimed process of each engine
#             (driver shader caches, pipelines); then ROUNDS rounds, each one process per
#             engine (cera first in odd rounds, llama.cpp first in even ones), each process
#             REPS timed runs of every test after a warm-up run; the table of medians over
#             the processes with their range, and the cera/llama.cpp ratio with the range
#             of the per-round ratios
#   profile   prepare; `cera bench --profile` on Qwen2.5-1.5B's layout: every kernel of a
#             decoded token and of a PROFILE_PROMPT-token prompt pass (default 512)
#   LAB=CMD   (any mode) runs CMD after the mode, in the cera tree, models in /tmp/models;
#             LAB_EARLY=CMD (bench) runs CMD after cera's untimed process while llama.cpp is
#             still building (device-timed work: profiles, kernel ceilings)
#
# Variables: STAGE (the staged folder, required), TESTS (pp512,tg128,tg128@d2048), ROUNDS
# (3), REPS (3), BUDGET_S (no round starts that would end past it, judged by the last
# round's seconds or ROUND_EST_S=60 before the first: a round of the four
# files took 25-26 s on an H100 at 1cd1f38; default 420),
# BUILD_WAIT_S (how long bench waits for llama.cpp's build, default 480), OUT (where the
# logs and the table go; /tmp/out unless set).
set -uo pipefail
case "${1:-}" in -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0;; esac
MODE=${1:-bench}
: "${STAGE:?set STAGE to the folder gpu_vulkan_stage.sh made}"
STAGE=$(realpath "$STAGE")
HERE=$(cd "$(dirname "$0")/.." && pwd)  # the cera tree
OUT=${OUT:-/tmp/out}
W=/tmp/gpuv  # this machine's state between calls while it stays up
mkdir -p "$OUT" "$W" /tmp/models
TESTS=${TESTS:-pp512,tg128,tg128@d2048}
ROUNDS=${ROUNDS:-3}
REPS=${REPS:-3}
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
exec > >(tee -a "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1 XDG_RUNTIME_DIR=/tmp

start_llama_build() {
    [ "$(cat $W/llama.rc 2>/dev/null)" = 0 ] && return 0
    [ -e $W/llama.started ] && [ ! -e $W/llama.rc ] && return 0  # under way
    rm -f $W/llama.rc; touch $W/llama.started
    mkdir -p /opt/vk && for f in "$STAGE"/debs/*.deb; do dpkg -x "$f" /opt/vk; done
    setsid bash -c '
        export PATH=/opt/vk/usr/bin:$PATH LD_LIBRARY_PATH=/opt/vk/usr/lib/x86_64-linux-gnu
        rm -rf /tmp/lcp && mkdir /tmp/lcp && cd /tmp/lcp && tar xJf "$0/lcp.tar.xz" && cd llama_cpp_python-* &&
        CMAKE_ARGS="-DGGML_VULKAN=ON -DLLAVA_BUILD=OFF -DLLAMA_BUILD_MTMD=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON \
          -DVulkan_INCLUDE_DIR=/opt/vk/usr/include -DVulkan_LIBRARY=$(ldconfig -p | grep -m1 -o "/.*libvulkan.so.1$") \
          -DVulkan_GLSLC_EXECUTABLE=/opt/vk/usr/bin/glslc" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
        python3 -m pip install --no-index --no-deps --no-build-isolation --target /tmp/llama -v . >/tmp/gpuv/llama_build.log 2>&1
        echo $? > /tmp/gpuv/llama.rc' "$STAGE" </dev/null >/dev/null 2>&1 &
}

prepare() {
    for f in "$STAGE"/gl/*.deb; do dpkg -x "$f" /; done; ldconfig
    ldconfig -p | grep -q libvulkan.so.1 || { echo "no Vulkan loader after unpacking gl/"; exit 1; }
    if [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
        export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    fi
    start_llama_build  # first: it is the longest step
    if [ ! -e $W/site.ok ]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$STAGE"/whl/*.whl || exit 1
        touch $W/site.ok
    fi
    export PYTHONPATH=/tmp/site
    if [ ! -e $W/cera.ok ]; then
        (cd "$HERE" && python3 -m pip install -q --no-index --no-deps --no-build-isolation -e ./cera-core \
            -e ./cera-backend-vulkan $(for d in cera-models/*/; do [ -f "$d/pyproject.toml" ] && printf -- "-e ./%s " "$d"; done) \
            -e ./cera-cli) >$W/pip.log 2>&1 || { tail -30 $W/pip.log; exit 1; }
        touch $W/cera.ok
    fi
    local pids=()
    for s in "$STAGE"/skel/*.skel; do
        n=$(basename "$s" .skel)
        [ -s /tmp/models/$n.gguf ] && continue
        python3 "$HERE/benchmarks/gguf_skeleton.py" synth "$s" /tmp/models/$n.gguf.part >/dev/null &&
            mv /tmp/models/$n.gguf.part /tmp/models/$n.gguf &
        pids+=($!)
    done
    [ ${#pids[@]} -gt 0 ] && wait "${pids[@]}"
    stamp "prepared (cera $(cat "$STAGE/COMMIT"), llama.cpp build $( [ -e $W/llama.rc ] && echo "rc=$(cat $W/llama.rc)" || echo "under way"))"
}

wait_llama() {
    for _ in $(seq $(( ${BUILD_WAIT_S:-480} / 5 ))); do [ -e $W/llama.rc ] && break; sleep 5; done
    stamp "llama.cpp build rc=$(cat $W/llama.rc 2>/dev/null || echo unfinished)"
    [ "$(cat $W/llama.rc 2>/dev/null)" = 0 ] || { tail -20 $W/llama_build.log; return 1; }
}

models() { for m in /tmp/models/*.gguf; do printf -- "--model %s " "$m"; done; }

one() {  # ENGINE REPS: one process of bench_models_one.py over every model and test
    local py=/tmp/site
    [ "$1" = llama.cpp ] && py=/tmp/llama:/tmp/site
    (cd "$HERE/benchmarks" && PYTHONPATH=$py timeout 300 python3 bench_models_one.py "$1" --device vulkan \
        --tests "$TESTS" --reps "$2" $(models))
}

device_lines() {
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader 2>&1
    python3 -c "
import wgpu
from cera_backend_vulkan.backend import VulkanBackend
b = VulkanBackend(); print('cera device:', b.probe().device, '| subgroup size', b.ctx.subgroup_size,
      '| wgpu', wgpu.__version__, '| features', ' '.join(sorted(b.ctx.adapter.features)))" 2>&1 | grep -v "^$"
    echo "cera commit $(cat "$STAGE/COMMIT"); load $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"
}

table() {  # the rounds' lines -> medians over processes, ranges, ratios
    python3 - "$OUT/runs.txt" <<'EOF'
import re, statistics, sys, collections
by = collections.defaultdict(dict)  # (model, test) -> engine -> {round: median}
for line in open(sys.argv[1]):
    m = re.match(r"round (\d+) (cera|llama\.cpp)\s+(\S+)\s+(\S+)\s+([0-9.]+) tok/s", line)
    if m:
        r, eng, model, test, v = int(m[1]), m[2], m[3].removesuffix(".gguf"), m[4], float(m[5])
        by[(model, test)].setdefault(eng, {})[r] = v
print("| model | test | cera (range) | llama.cpp (range) | cera/llama.cpp | per round |")
print("|:--|:--|--:|--:|--:|--:|")
for (model, test), e in by.items():
    c, l = e.get("cera", {}), e.get("llama.cpp", {})
    cell = lambda d: f"{statistics.median(d.values()):.1f} ({min(d.values()):.0f}-{max(d.values()):.0f})" if d else "-"
    ratio = f"{statistics.median(c.values()) / statistics.median(l.values()):.2f}" if c and l else "-"
    rr = sorted(c[r] / l[r] for r in c if r in l)
    print(f"| {model} | {test} | {cell(c)} | {cell(l)} | {ratio} | {f'{rr[0]:.2f}-{rr[-1]:.2f}' if rr else '-'} |")
EOF
}

case "$MODE" in
prepare) prepare ;;
bench)
    prepare
    device_lines
    stamp "cera: untimed process"
    one cera 1 >$W/warm_cera.txt 2>&1 || tail -20 $W/warm_cera.txt
    stamp "cera warmed"
    # GPU-side measurements that bear the build's CPU load, while llama.cpp builds
    if [ -n "${LAB_EARLY:-}" ] && [ ! -e $W/llama.rc ]; then (cd "$HERE" && bash -c "$LAB_EARLY"); stamp "lab (early) done"; fi
    if wait_llama; then
        stamp "llama.cpp: untimed process"
        one llama.cpp 1 >$W/warm_llama.txt 2>&1; grep -E "ggml_vulkan|matrix cores|rror" $W/warm_llama.txt
        : > "$OUT/runs.txt"
        r=1; last=${ROUND_EST_S:-60}  # a round's seconds: the last one's, a guess before the first
        while [ $r -le "$ROUNDS" ]; do
            now=$(( $(date +%s) - t0 ))
            [ $(( now + last )) -gt "${BUDGET_S:-420}" ] && { stamp "round $r not started: budget"; break; }
            rs=$(date +%s)
            order="cera llama.cpp"; [ $((r % 2)) = 0 ] && order="llama.cpp cera"
            for e in $order; do
                one $e "$REPS" 2>&1 | grep "tok/s" | sed "s/^/round $r /" | tee -a "$OUT/runs.txt"
            done
            last=$(( $(date +%s) - rs )); stamp "round $r done (${last}s)"
            r=$((r + 1))
        done
        table | tee "$OUT/table.md"
    fi
    ;;
profile)
    prepare
    (cd "$HERE" && timeout 200 cera bench -m /tmp/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --device vulkan \
        -p "${PROFILE_PROMPT:-512}" -n 4 -r 1 --profile 2>&1 | grep -v "^$")
    ;;
*) echo "unknown mode $MODE (bench, prepare, profile)"; exit 2 ;;
esac
if [ -n "${LAB:-}" ]; then (cd "$HERE" && bash -c "$LAB"); fi
stamp "done"
