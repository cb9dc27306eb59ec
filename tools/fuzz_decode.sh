#!/bin/sh
# Builds tests/fuzz/fuzz_decode.c with clang's libFuzzer, ASan and UBSan and
# runs it (not part of ctest). Needs clang with libFuzzer: Debian's `clang`
# and `libclang-rt-dev` (or clang-14 / libclang-rt-14-dev).
#   tools/fuzz_decode.sh [seconds, default 300] [more libFuzzer flags]
# New inputs go to build-fuzz/corpus (the committed seeds in
# tests/fuzz/corpus are only read); crashes land in build-fuzz/artifacts/.
# Reproduce one with: build-fuzz/fuzz_decode build-fuzz/artifacts/crash-...
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
out=${FUZZ_OUT:-$root/build-fuzz}
secs=${1:-300}
[ $# -gt 0 ] && shift
cc=${CC:-clang}
mkdir -p "$out/corpus" "$out/artifacts"
# shellcheck disable=SC2046 # pkg-config's flags are meant to split
"$cc" -std=c11 -g -O1 -fno-omit-frame-pointer -Wall -Wextra -Wno-unused-parameter \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -D_POSIX_C_SOURCE=200809L -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION -I"$root" \
    $(pkg-config --cflags libturbojpeg libpng) \
    "$root/tests/fuzz/fuzz_decode.c" "$root/runtime/data/image.c" "$root/runtime/data/jpeg.c" \
    "$root/runtime/data/png.c" "$root/runtime/data/resize.c" "$root/ir/status.c" \
    $(pkg-config --libs libturbojpeg libpng) -lm -o "$out/fuzz_decode"
exec "$out/fuzz_decode" -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -dict="$root/tests/fuzz/decode.dict" -artifact_prefix="$out/artifacts/" -print_final_stats=1 \
    "$@" "$out/corpus" "$root/tests/fuzz/corpus"
