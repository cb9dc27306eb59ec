#!/usr/bin/env bash
# tools/nvrtc_zoo_check.sh [BUILD_DIR] [FILTER]: compiles every generated CUDA
# kernel of every model of the zoo (or those whose name contains FILTER) with
# NVRTC for sm_90, in all twelve graphs ctimm makes of it: eval and training
# step, f32 / --amp f16 / --amp bf16, NCHW and channels-last. No GPU needed.
# CI's test_nvrtc compiles the four test models' 48 graphs and one full-size
# model of each family; this is the whole matrix, 276 graphs, about half an hour on
# 2 cores with an empty kernel cache (its own, under the build directory, so
# a second run, or one after a FILTER run, skips what it has compiled). Prints a
# line per graph and a count of failures at the end; exits 1 if any failed.
set -uo pipefail
build=${1:-build}
filter=${2:-}
compile="$build/ctimm-compile"
[ -x "$compile" ] || { echo "nvrtc_zoo_check: no $compile: build first (cmake --build $build)" >&2; exit 2; }
export CTIMM_CACHE_DIR="$build/nvrtc-zoo-cache"
failed=0
graphs=0
start=$(date +%s)
for model in $("$compile" --list-models $filter); do
    for mode in eval train; do
        for prec in f32 f16 bf16; do
            for layout in nchw channels_last; do
                args=(--model "$model" --compile cuda --sm 90)
                # batch 2: a training-mode BatchNorm1d (LeViT's heads) needs two values a channel, as torch's
                [ $mode = train ] && args+=(--train --batch-size 2)
                [ $prec = f16 ] && args+=(--amp)
                [ $prec = bf16 ] && args+=(--amp --amp-dtype bfloat16)
                [ $layout = channels_last ] && args+=(--channels-last)
                graphs=$((graphs + 1))
                if out=$("$compile" "${args[@]}" 2>&1); then
                    echo "$model $mode $prec $layout: $(grep '^compiled:' <<< "$out")"
                else
                    failed=$((failed + 1))
                    echo "$model $mode $prec $layout: FAILED: $(tail -3 <<< "$out")"
                fi
            done
        done
    done
done
echo "nvrtc_zoo_check: $graphs graphs, $failed failed, $(($(date +%s) - start)) s"
[ $failed -eq 0 ]
