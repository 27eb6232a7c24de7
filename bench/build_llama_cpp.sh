#!/usr/bin/env bash
# build_llama_cpp.sh - builds the llama.cpp the side-by-side benchmarks compare against, outside
# the repository: v0.5.0's source from the git bundle inside the npm package node-llama-cpp@3.22.1,
# CPU only, native flags, Release. Nothing of it is ever committed.
#
#   bench/build_llama_cpp.sh [DEST]      (DEST: /work/llama.cpp-build)
#
# Writes DEST/bin/{llama-bench,llama-batched-bench,llama-server,llama-quantize,llama-cli} and, on
# a CPU with AMX, a second build DEST-noamx without it (the native AMX path crashed on one machine
# of this class); on other CPUs DEST-noamx is a link to DEST, so the scripts' default
# LLAMA_LIB=DEST-noamx:DEST-noamx/bin works on both. AVX2=1 also builds DEST-avx2: AVX, AVX2,
# FMA, F16C and BMI2 only (no AVX-512, AVX-VNNI or AMX), to set llama.cpp's AVX2 kernels beside
# Nexus's (NX_KERNELS=avx2) on an AVX-512 CPU. Jobs: JOBS (nproc).
set -euo pipefail
DEST=${1:-/work/llama.cpp-build}
SRC=${SRC:-$(dirname "$DEST")/llama-src}
JOBS=${JOBS:-$(nproc)}
TARGETS="llama-bench llama-batched-bench llama-server llama-quantize llama-cli"

command -v cmake >/dev/null || apt-get install -y cmake
command -v npm >/dev/null || apt-get install -y nodejs npm
mkdir -p "$SRC"
cd "$SRC"
[ -f node-llama-cpp-3.22.1.tgz ] || npm pack node-llama-cpp@3.22.1 >/dev/null
[ -f package/llama/gitRelease.bundle ] || tar xzf node-llama-cpp-3.22.1.tgz package/llama/gitRelease.bundle
[ -d llama.cpp ] || git clone -q package/llama/gitRelease.bundle llama.cpp
git -C llama.cpp describe --tags 2>/dev/null || true

build() { # build DIR EXTRA-CMAKE-FLAGS...
  local dir=$1; shift
  cmake -S llama.cpp -B "$dir" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DGGML_CUDA=OFF -DLLAMA_BUILD_TESTS=OFF "$@" >/dev/null
  # shellcheck disable=SC2086
  cmake --build "$dir" -j "$JOBS" --target $TARGETS >/dev/null
}
build "$DEST"
if grep -q ' amx' /proc/cpuinfo; then
  # GGML_NATIVE=ON passes -march=native, which turns AMX on whatever the GGML_AMX_* options say
  # (that build crashed the same way): name the native CPU's other features one by one instead
  flags=(-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
  for f in avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx512f:AVX512 avx512vbmi:AVX512_VBMI \
           avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16 avx_vnni:AVX_VNNI; do
    grep -qw "${f%%:*}" /proc/cpuinfo && flags+=("-DGGML_${f#*:}=ON")
  done
  build "$DEST-noamx" "${flags[@]}"
else
  ln -sfn "$DEST" "$DEST-noamx"
fi
if [ "${AVX2:-0}" = 1 ]; then
  build "$DEST-avx2" -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
    -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF \
    -DGGML_AMX_BF16=OFF
fi
ls "$DEST/bin"
