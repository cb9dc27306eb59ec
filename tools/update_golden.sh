#!/bin/sh
# Rewrites the golden IR dumps in tests/data/golden from the current build.
# Run after a change that is meant to alter the IR, then review the diff.
set -eu
build=${1:-build}
for golden in test_resnet.eval test_resnet.train test_vit.eval; do
    model=${golden%.*}
    flags=""
    [ "${golden##*.}" = train ] && flags="--train"
    "$build/ctimm-compile" --model "$model" --batch-size 2 $flags --dump-ir > "tests/data/golden/$golden.ir"
done
