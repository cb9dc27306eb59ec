#!/bin/sh
# Builds one fuzz target of tests/fuzz/ with clang's libFuzzer, ASan and
# UBSan and runs it (the sanitizer build's ctest runs the same targets with
# tests/fuzz/fuzz_driver.c instead, 20 s each). Needs clang with libFuzzer:
# Debian's `clang` and `libclang-rt-dev` (or clang-14 / libclang-rt-14-dev).
#   tools/fuzz.sh decode|safetensors|config|torch_file [seconds, default 300] [more libFuzzer flags]
# New inputs go to build-fuzz/TARGET/corpus (the committed seeds are only
# read); crashes land in build-fuzz/TARGET/artifacts/. Reproduce one with:
# build-fuzz/fuzz_TARGET build-fuzz/TARGET/artifacts/crash-...
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
target=${1:?usage: tools/fuzz.sh decode|safetensors|config|torch_file [seconds] [libFuzzer flags]}
shift
secs=${1:-300}
[ $# -gt 0 ] && shift
fz=$root/tests/fuzz
# The target's sources, pkg-config packages and seed folder.
defs=
case $target in
decode)
    src="$fz/fuzz_decode.c $root/runtime/data/image.c $root/runtime/data/jpeg.c $root/runtime/data/png.c
         $root/runtime/data/resize.c"
    defs=-DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION # see runtime/data/image_codec.h
    pkgs="libturbojpeg libjpeg libpng" seeds=$fz/corpus ;;
safetensors)
    src="$fz/fuzz_safetensors.c $root/runtime/safetensors.c $root/ir/dtype.c"
    pkgs=libcjson seeds=$fz/corpus_safetensors ;;
config)
    src="$fz/fuzz_config.c $root/cli/train_config.c $root/cli/train_py_args.c"
    pkgs=yaml-0.1 seeds=$fz/corpus_config ;;
torch_file)
    src="$fz/fuzz_torch_file.c $root/runtime/torch_file.c $root/runtime/torch_pickle.c $root/runtime/zip_archive.c
         $root/runtime/safetensors.c $root/ir/dtype.c"
    defs=-DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION # no zip CRC check (runtime/zip_archive.c)
    pkgs=libcjson seeds=$root/tests/data/torch ;;
*) echo "tools/fuzz.sh: unknown target '$target' (decode, safetensors, config or torch_file)" >&2; exit 2 ;;
esac
out=${FUZZ_OUT:-$root/build-fuzz}
cc=${CC:-clang}
mkdir -p "$out/$target/corpus" "$out/$target/artifacts"
# shellcheck disable=SC2046,SC2086 # the source list and pkg-config's flags are meant to split
"$cc" -std=c11 -g -O1 -fno-omit-frame-pointer -Wall -Wextra -Wno-unused-parameter \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -D_POSIX_C_SOURCE=200809L $defs -I"$root" $(pkg-config --cflags $pkgs) \
    $src "$root/ir/status.c" $(pkg-config --libs $pkgs) -lm -o "$out/fuzz_$target"
exec "$out/fuzz_$target" -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -dict="$fz/$target.dict" -artifact_prefix="$out/$target/artifacts/" -print_final_stats=1 \
    "$@" "$out/$target/corpus" "$seeds"
