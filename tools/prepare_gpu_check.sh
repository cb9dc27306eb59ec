#!/bin/sh
# Gathers, on this Debian machine, what bench/gpu_check.sh needs on the lent
# device machine, which reaches no package registry: the .deb files of the
# Debian packages ctimm builds with (CMakeLists.txt's pkg-config modules,
# OpenBLAS's OpenMP build, their runtime libraries and pkg-config itself;
# no MPI: it is optional, and Debian 12's needs glibc >= 2.36), and timm's
# benchmark.py (not in timm's pip package). They go to .gpu-deps/, which
# .git/info/exclude ignores so it travels only as a carried path (about
# 18 MiB with the kernel images below; the tracked tree is ~42, the limit
# 64). The device builds ctimm itself, against its own CUDA toolkit, which
# matches its driver; bench/gpu_check.sh unpacks the packages there with
# dpkg -x into a prefix.
#
# Then, where a build here has ctimm-compile with NVRTC ($CTIMM_BUILD, else
# build-dev/ or build/), the library kernels' three units (f32, f16, bf16)
# compiled for sm_90, as the device's NVRTC would compile them (the same
# source, options and NVRTC major.minor make the same cache key), into
# .gpu-deps/kernel-cache.tar.gz, which gpu_check.sh's deps stage unpacks into
# the lease's kernel cache: the probe and the parity tests then find them
# instead of spending some 40 s each of device time on NVRTC (session 21's
# lease: probe 39 s, parity 32 s). A device whose NVRTC differs misses them
# and compiles, as without them.
#
# Then, with the device tool (one call, about 10 minutes of device time):
#
#   run  command:   bash bench/gpu_check.sh --budget 420
#        carry:     [".gpu-deps"]
#        timeout_s: 480
#
# The reply's output ends with the stage table (and the side-by-side table
# of the bench stage); $OUT brings back summary.csv, summary.txt, table.txt
# and logs.tar.gz (every stage's log and CSV).
#
#   tools/prepare_gpu_check.sh [TIMM_REPO]   (default: the mirror in /work/.mirror)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TIMM_REPO=${1:-/work/.mirror/huggingface+pytorch-image-models/repo}
DEPS=$ROOT/.gpu-deps
PACKAGES="libcjson1 libcjson-dev libturbojpeg0 libturbojpeg0-dev libjpeg62-turbo libjpeg62-turbo-dev
libpng16-16 libpng-dev zlib1g-dev libxxhash0 libxxhash-dev libyaml-0-2 libyaml-dev libopenblas0
libopenblas0-openmp libopenblas-openmp-dev libgfortran5 libquadmath0 pkgconf pkgconf-bin libpkgconf3"

exclude=$(git -C "$ROOT" rev-parse --absolute-git-dir)/info/exclude
mkdir -p "$(dirname "$exclude")"
grep -qx '/.gpu-deps/' "$exclude" 2>/dev/null || echo '/.gpu-deps/' >>"$exclude"

rm -rf "$DEPS"
mkdir -p "$DEPS"
# apt-get's own status decides nothing: each package is checked below
# shellcheck disable=SC2086
(cd "$DEPS" && apt-get download $PACKAGES 2>&1 | grep -v -e '^Get:' -e '^Fetched' -e 'unsandboxed' >&2) || true
for p in $PACKAGES; do
    ls "$DEPS/${p}_"*.deb >/dev/null 2>&1 || { echo "prepare_gpu_check: apt-get could not download $p" >&2; exit 1; }
done

if [ -f "$TIMM_REPO/benchmark.py" ]; then
    cp "$TIMM_REPO/benchmark.py" "$DEPS/benchmark.py"
elif ! git -C "$TIMM_REPO" show HEAD:benchmark.py >"$DEPS/benchmark.py" 2>/dev/null; then
    echo "prepare_gpu_check: timm's benchmark.py not found in $TIMM_REPO (give a timm checkout)" >&2
    exit 1
fi
BUILD=${CTIMM_BUILD:-}
[ -n "$BUILD" ] || for b in "$ROOT/build-dev" "$ROOT/build"; do [ -x "$b/ctimm-compile" ] && BUILD=$b && break; done
if [ -n "$BUILD" ] && [ -x "$BUILD/ctimm-compile" ]; then
    kc=$(mktemp -d)
    # one program a storage type: each compiles its type's unit (and f32's, the loss's)
    for amp in "" "--amp --amp-dtype float16" "--amp --amp-dtype bfloat16"; do
        # shellcheck disable=SC2086
        CTIMM_CACHE_DIR=$kc/ctimm "$BUILD/ctimm-compile" --model test_resnet --train $amp \
            --dump-program cuda --sm 90 >/dev/null || { echo "prepare_gpu_check: $BUILD/ctimm-compile could not compile for sm_90" >&2; rm -rf "$kc"; exit 1; }
    done
    tar -czf "$DEPS/kernel-cache.tar.gz" -C "$kc" ctimm
    echo "prepare_gpu_check: $(ls "$kc/ctimm" | wc -l) kernel images for sm_90 in $DEPS/kernel-cache.tar.gz" >&2
    rm -rf "$kc"
else
    echo "prepare_gpu_check: no ctimm-compile built here (CTIMM_BUILD): the lease compiles every kernel itself" >&2
fi
echo "prepare_gpu_check: $(du -sh "$DEPS" | cut -f1) in $DEPS; now the device call in this script's header" >&2
