#!/bin/sh
# Rewrites the golden IR dumps in tests/data/golden from the current build.
# Run after a change that is meant to alter the IR, then review the diff.
# NAME.MODE.ir is the graph as built (--passes none); NAME.MODE.PASS.ir the
# graph after the default pipeline, dumped after PASS.
set -eu
build=${1:-build}
for golden in test_resnet.eval test_resnet.train test_vit.eval test_resnet.eval.bn_fold; do
    model=${golden%%.*}
    rest=${golden#*.}
    mode=${rest%%.*}
    pass=${rest#*.}
    flags="--passes none --dump-ir"
    [ "$pass" != "$rest" ] && flags="--dump-ir-after $pass"
    [ "$mode" = train ] && flags="$flags --train"
    "$build/ctimm-compile" --model "$model" --batch-size 2 $flags > "tests/data/golden/$golden.ir"
done
