#!/bin/sh
# bench/program_overhead.sh BEFORE_BENCH AFTER_BENCH [ROUNDS]: ctimm-bench
# --bench train of the four test models at batch 1 and 32 on the cpu
# backend, two ctimm-bench binaries (a build before a change and one after)
# interleaved round by round on one thread, then a table of the median step
# time of each and their ratio. The CPU model heads the table.
set -eu
before=$1 after=$2 rounds=${3:-3}
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
out=$(mktemp)
for r in $(seq "$rounds"); do
    for m in test_resnet test_vit test_efficientnet test_convnext; do
        for b in 1 32; do
            for side in before after; do
                bin=$before
                [ $side = after ] && bin=$after
                ms=$("$bin" -m $m --bench train -b $b --num-warm-iter 3 --num-bench-iter 10 2>&1 |
                    sed -n 's/.*(median \([0-9.]*\) ms).*/\1/p')
                echo "$m $b $side $ms" >> "$out"
            done
        done
    done
done
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), 1 thread, $rounds rounds"
echo "| model | batch | before ms (median of rounds) | after ms | after/before |"
echo "|---|---|---|---|---|"
for m in test_resnet test_vit test_efficientnet test_convnext; do
    for b in 1 32; do
        med() { grep "^$m $b $1 " "$out" | cut -d' ' -f4 | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
        x=$(med before) y=$(med after)
        echo "| $m | $b | $x | $y | $(awk -v x="$x" -v y="$y" 'BEGIN {printf "%.3f", y / x}') |"
    done
done
rm -f "$out"
