#!/usr/bin/env bash
# Builds, on a machine with network (Debian or Ubuntu, x86-64), the one folder that
# gpu_vulkan.sh needs on a GPU machine that reaches no network and takes 64 MiB of files a
# run (the repository's tracked tree included): about 16 MB.
#
#   bash benchmarks/gpu_vulkan_stage.sh [DIR]     (default DIR: .gpu-stage, git-ignored)
#
# DIR holds:
#   gl/      libvulkan1 and the GL/EGL loaders (the host's release, amd64)
#   debs/    glslc, libshaderc1, libvulkan-dev, spirv-headers from Debian trixie: glslc
#            2025.2 and Vulkan headers 1.4 are what give llama.cpp's Vulkan build its
#            cooperative-matrix shaders
#   whl/     the cp312 wheels cera needs beside the GPU image's packages (wgpu 0.32,
#            rendercanvas, sniffio, cffi, pycparser, gguf, llguidance within cera-core's
#            pin, diskcache for llama-cpp-python)
#   lcp.tar.xz   llama-cpp-python 0.3.36's source (LCP_SRC) without git history, docs,
#            tests, vocab files, tools and the other GPU backends: built there with
#            -DGGML_VULKAN=ON
#   skel/    gguf_skeleton.py skeletons of the four real files (their layouts; the files
#            are rebuilt there with random weights)
#   cera.tar.xz  the committed cera code the benchmark runs (HEAD; its commit in COMMIT)
#
# Needs: apt-get, pip, xz, git, and the four real files in cera's bundle cache
# (CERA_CACHE_DIR, default ~/.cache/cera: `cera pull` or the tests fetch them).
set -euo pipefail
case "${1:-}" in -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0;; esac
REPO=$(git rev-parse --show-toplevel)
DIR=$(realpath -m "${1:-$REPO/.gpu-stage}")
LCP_SRC=${LCP_SRC:-/work/wheels/src/llama_cpp_python-0.3.36}
CACHE=${CERA_CACHE_DIR:-$HOME/.cache/cera}/bundles
PY=${PYTHON:-python3}
mkdir -p "$DIR"/{gl,debs,whl,skel}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# apt without touching the host's state: own lists, own cache, amd64 only
apt_in() {  # NAME SOURCES-LINE -> apt options
    mkdir -p "$TMP/$1/lists/partial" "$TMP/$1/cache/archives/partial"
    echo "$2" > "$TMP/$1/sources.list"
    echo "-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::Etc::SourceList=$TMP/$1/sources.list
          -oDir::Etc::SourceParts=/dev/null -oDir::State::Lists=$TMP/$1/lists -oDir::Cache=$TMP/$1/cache
          -oDir::State::status=/dev/null"
}
HOST_SRC=$(grep -h -E '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | head -1 || true)
if [ -z "$HOST_SRC" ]; then  # deb822 sources (Debian 12's default)
    . /etc/os-release
    HOST_SRC="deb [arch=amd64] http://deb.debian.org/debian ${VERSION_CODENAME} main"
fi
O=$(apt_in host "$HOST_SRC")
apt-get $O update -qq
(cd "$DIR/gl" && rm -f ./*.deb && apt-get $O download -qq libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
O=$(apt_in trixie "deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main")
apt-get $O update -qq
(cd "$DIR/debs" && rm -f ./*.deb && apt-get $O download -qq glslc libshaderc1 libvulkan-dev spirv-headers)

rm -f "$DIR"/whl/*.whl
PLAT=""
for n in 17 24 27 28 31 34 35; do PLAT="$PLAT --platform manylinux_2_${n}_x86_64"; done
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    $PLAT --platform manylinux2014_x86_64 --platform any -d "$DIR/whl" \
    "wgpu>=0.32,<0.33" "rendercanvas>=2.7" sniffio "cffi>=1.16" pycparser "gguf>=0.17" \
    "llguidance>=1.9.1,<2" diskcache

# llama-cpp-python's source, trimmed to what a Vulkan build compiles
N=$(basename "$LCP_SRC")
V=$N/vendor/llama.cpp
EX=(--exclude=.git --exclude=.github --exclude="$N/docs" --exclude="$N/tests" --exclude="$N/examples" --exclude="$N/docker")
for d in models docs examples tests media pocs benches gguf-py skills tools app ci scripts grammars conversion; do
    EX+=(--exclude="$V/$d")
done
for b in cuda sycl opencl hexagon metal et cann musa hip webgpu zdnn openvino rpc blas kompute virtgpu zendnn; do
    EX+=(--exclude="$V/ggml/src/ggml-$b")
done
tar -C "$(dirname "$LCP_SRC")" -cf - "${EX[@]}" "$N" | xz -6 > "$DIR/lcp.tar.xz"

for f in smollm2-135m-instruct-q4_1/SmolLM2-135M-Instruct.Q4_1.gguf gemma3-270m-q4_k_m/gemma-3-270m-q4_k_m.gguf \
         qwen2.5-coder-0.5b-instruct-q4_k_m/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \
         qwen2.5-coder-1.5b-instruct-q4_k_m/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf; do
    [ -f "$CACHE/$f" ] || { echo "missing $CACHE/$f: fetch the bundle first" >&2; exit 1; }
    $PY "$REPO/benchmarks/gguf_skeleton.py" skeleton "$CACHE/$f" "$DIR/skel/$(dirname "$f").skel"
done

git -C "$REPO" archive --format=tar HEAD cera-core cera-backend-vulkan cera-cli cera-models benchmarks \
    ':!cera-models/*/tests' | xz -6 > "$DIR/cera.tar.xz"
git -C "$REPO" rev-parse --short HEAD > "$DIR/COMMIT"
du -sh "$DIR"
echo "staged in $DIR (commit $(cat "$DIR/COMMIT")); carry it and run: bash benchmarks/gpu_vulkan.sh --help"
