#!/usr/bin/env bash
# A/B studies of the Vulkan backend's variants on a GPU, one part an argument (without
# one: checks profile attention split), after `gpu_vulkan.sh prepare` installed
# everything: pass it as that script's LAB. Each part alternates the settings it compares,
# file by file, two rounds, so a machine's drift hits every setting alike.
#   checks     the kernels without wgpu's runtime checks (CERA_VULKAN_SHADER_CHECKS=none,
#              the default) against wgpu's default (all): the decoded token and pp512 of
#              each file; then the 4x8 tile against 4x4
#   profile    pp512 and `cera bench --profile` of each file (a decoded token and a
#              prompt pass of 512, per kernel)
#   attention  pp512 under CERA_VULKAN_ATTENTION=lanes-whole (each row's attention on its
#              own) and lanes (prompt passes in tiles)
#   split      pp512 under CERA_VULKAN_MATMUL=4x4 and 4x4-split
#   shapes     the tiled kernels shape by shape (vulkan_matmul_sweep.py over 512 rows)
#   floor      vulkan_dispatch_floor.py: what one more dispatch costs (chains of a
#              trivial kernel in one pass)
#   tiled      pp512 under CERA_VULKAN_MATMUL=4x4, 4x4-skew and 4x4-skew-split
#   rotate     the fusion tests (test_fusion.py: the rotating attention's bits against
#              the rope dispatch's, on a GPU whose workgroups run at once), then the
#              decoded token under CERA_VULKAN_ROPE_ATTENTION=0 and 1
#   profile1   `cera bench --profile` of Qwen2.5 1.5B (a decoded token, a prompt pass)
#   deep       Qwen2.5 1.5B's and Gemma 3's decoded token at depth 2048: its profile, then
#              tg64@d2048 with the attention split over 16 (the default), 4, 8 and 32
#              workgroups (CERA_VULKAN_ATT_SPLIT) and whole (lanes-whole)
#   int8       the integer products' tests (with the CPU backend: CPU=1), then the decoded
#              token under CERA_VULKAN_UNIT_DOT=i8 (each lane quantizes x), i8-shared (once a
#              workgroup, in shared memory) and i8 with x through shared memory
#              (unit-auto-sx); Qwen2.5 1.5B's profile under i8-shared
#   int8b      Qwen2.5 1.5B's decoded token profiled under the default (i8-shared), the row
#              kernel "unit", UNIT_DOT=i8 and f32; then the decoded token under the
#              default, "unit" and "unit-f4"
#   final      the integer products' tests (CPU=1: the CPU backend is their comparison),
#              then the decoded token under CERA_VULKAN_UNIT_DOT=f32 and the default
# Run (carry .gpu-stage, made by gpu_vulkan_stage.sh; the cera tree unpacked as gpu_vulkan.sh says):
#   LAB="bash benchmarks/experiments/vulkan_variants.sh attention" STAGE=... bash benchmarks/gpu_vulkan.sh prepare
set -uo pipefail
case "${1:-}" in -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0;; esac
pp512() {  # pp512 of file $1 under the environment given after it
    local m=$1; shift
    env "$@" timeout 90 cera bench -m "$m" --device vulkan -p 512 -n 0 -r 3 2>&1 | grep pp512
}
FILES=${FILES:-"/tmp/models/qwen*.gguf /tmp/models/gemma*.gguf /tmp/models/smollm2*.gguf"}
alternate_pp512() {  # two rounds over the files: pp512 under each setting given (VAR=value), in turn
    for rep in 1 2; do for m in $FILES; do for v in "$@"; do
        echo -n "pp512 $v $(basename "$m"): "; pp512 "$m" "$v"
    done; done; done
}
alternate_decode() {  # two rounds over the files: the decoded token under each setting ("VAR=value ..."), in turn
    for rep in 1 2; do for m in $FILES; do for v in "$@"; do
        echo -n "$v: "; env $v timeout 60 python3 benchmarks/vulkan_decode_split.py "$m"
    done; done; done
}
checks() {
    alternate_decode CERA_VULKAN_SHADER_CHECKS=all CERA_VULKAN_SHADER_CHECKS=none
    for rep in 1 2; do
        for m in /tmp/models/qwen*.gguf $([ $rep = 1 ] && echo /tmp/models/gemma*.gguf /tmp/models/smollm2*.gguf); do
            for c in all none; do
                echo -n "pp512 checks $c $(basename "$m"): "; pp512 "$m" CERA_VULKAN_SHADER_CHECKS=$c
            done
        done
    done
    for m in /tmp/models/qwen2.5-coder-1.5b*.gguf /tmp/models/qwen2.5-coder-0.5b*.gguf; do
        for k in 4x4 4x8; do echo -n "matmul $k checks none $(basename "$m"): "; pp512 "$m" CERA_VULKAN_MATMUL=$k; done
    done
}
profile() {
    for m in /tmp/models/qwen2.5-coder-1.5b*.gguf /tmp/models/qwen2.5-coder-0.5b*.gguf /tmp/models/gemma*.gguf /tmp/models/smollm2*.gguf; do
        echo "== $(basename "$m")"; timeout 120 cera bench -m "$m" --device vulkan -p 512 -n 1 -r 2 --profile 2>&1 | grep -v "^KV"
    done
}
attention() { alternate_pp512 CERA_VULKAN_ATTENTION=lanes-whole CERA_VULKAN_ATTENTION=lanes; }
split() { alternate_pp512 CERA_VULKAN_MATMUL=4x4 CERA_VULKAN_MATMUL=4x4-split; }
shapes() {
    timeout 300 python3 benchmarks/experiments/vulkan_matmul_sweep.py --variants 4x4,4x4-skew,4x4-split,4x4-m32
}
floor() {
    timeout 120 python3 benchmarks/experiments/vulkan_dispatch_floor.py
}
tiled() { alternate_pp512 CERA_VULKAN_MATMUL=4x4 CERA_VULKAN_MATMUL=4x4-skew CERA_VULKAN_MATMUL=4x4-skew-split; }
rotate() {
    timeout 150 python3 -m pytest -q -p no:cacheprovider -o addopts="" tests/backend_vulkan/test_fusion.py 2>&1 | tail -4
    alternate_decode CERA_VULKAN_ROPE_ATTENTION=0 CERA_VULKAN_ROPE_ATTENTION=1
}
profile1() {
    timeout 120 cera bench -m /tmp/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --device vulkan -p 512 -n 1 -r 2 --profile 2>&1 | grep -v "^KV"
}
deep() {
    for m in /tmp/models/qwen2.5-coder-1.5b*.gguf /tmp/models/gemma*.gguf; do
        echo "== $(basename "$m")"
        timeout 100 cera bench -m "$m" --device vulkan -p 1 -n 1 -d 2048 -r 1 --profile 2>&1 | grep -v "^KV" | head -14
        for s in 16 4 8 32 16; do
            echo -n "split $s: "; CERA_VULKAN_ATT_SPLIT=$s timeout 60 cera bench -m "$m" --device vulkan -p 0 -n 64 -d 2048 -r 2 2>&1 | grep tg64
        done
        echo -n "whole: "; CERA_VULKAN_ATTENTION=lanes-whole timeout 60 cera bench -m "$m" --device vulkan -p 0 -n 64 -d 2048 -r 2 2>&1 | grep tg64
    done
}
int8() {
    timeout 150 python3 -m pytest -q -p no:cacheprovider -o addopts="" tests/backend_vulkan/test_unit_kernel.py -k integer 2>&1 | tail -2
    alternate_decode CERA_VULKAN_UNIT_DOT=i8 CERA_VULKAN_UNIT_DOT=i8-shared "CERA_VULKAN_UNIT_DOT=i8 CERA_VULKAN_ROW_KERNEL=unit-auto-sx"
    CERA_VULKAN_UNIT_DOT=i8-shared timeout 120 cera bench -m /tmp/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --device vulkan -p 1 -n 1 -r 2 --profile 2>&1 | grep -v "^KV" | head -14
}
int8b() {
    for v in "" CERA_VULKAN_ROW_KERNEL=unit CERA_VULKAN_UNIT_DOT=i8 CERA_VULKAN_UNIT_DOT=f32; do
        echo "== profile ${v:-default}"
        env $v timeout 60 cera bench -m /tmp/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --device vulkan -p 1 -n 1 -r 1 --profile 2>&1 | grep -v "^KV" | sed -n '3,12p'
    done
    alternate_decode CERA_VULKAN_UNIT_DOT=i8-shared CERA_VULKAN_ROW_KERNEL=unit CERA_VULKAN_ROW_KERNEL=unit-f4
}
final() {
    timeout 200 python3 -m pytest -q -p no:cacheprovider -o addopts="" tests/backend_vulkan/test_unit_kernel.py \
        tests/backend_vulkan/test_fusion.py tests/backend_vulkan/test_switches.py tests/backend_vulkan/test_conformance.py \
        -k "integer or sandwich or switch or tiny_family" 2>&1 | tail -3
    alternate_decode CERA_VULKAN_UNIT_DOT=f32 CERA_VULKAN_UNIT_DOT=i8-shared
}
for part in ${@:-checks profile attention split}; do "$part"; done
