#!/bin/sh
# tools/fuzz.sh decode: the image decoders' fuzz target with libFuzzer.
#   tools/fuzz_decode.sh [seconds, default 300] [more libFuzzer flags]
exec "$(dirname "$0")/fuzz.sh" decode "$@"
