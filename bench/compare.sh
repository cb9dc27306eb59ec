#!/bin/sh
# ctimm-bench against timm's own benchmark.py: the same model list, bench
# mode, batch size, precision, layout, device and thread count, in one run,
# model by model, then one table joined on the model column with ctimm /
# timm per model.
#
#   bench/compare.sh [MODEL_LIST] [-- extra flags for both, e.g. --bench train -b 32 --amp]
#
# Defaults: bench/benchmark_set.txt, --bench inference -b 1, --device cpu on a
# machine without a GPU (cuda where there is one and ctimm has the backend).
# Environment: THREADS (2: torch.set_num_threads and OpenBLAS/OpenMP threads,
# for both sides), ROUNDS (1: how many times each model runs on each side),
# TIMM (/opt/timm: the pip package), TIMM_REPO (timm's git repository, for
# benchmark.py, which the package does not ship; default the mirror in
# /work/.mirror), PYTHON (/usr/bin/python3: Debian's torch), OUT (a folder
# for the CSVs, one per side, round and model, and the logs; default a
# temporary one).
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for both sides alike.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LIST=$ROOT/bench/benchmark_set.txt
if [ $# -gt 0 ] && [ "$1" != "--" ]; then LIST=$1; shift; fi
[ $# -gt 0 ] && [ "$1" = "--" ] && shift
FLAGS=${*:-"--bench inference -b 1"}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-1}
TIMM=${TIMM:-/opt/timm}
TIMM_REPO=${TIMM_REPO:-/work/.mirror/huggingface+pytorch-image-models/repo}
PYTHON=${PYTHON:-/usr/bin/python3}
OUT=${OUT:-$(mktemp -d /tmp/ctimm_compare.XXXXXX)}
DEVICE=cpu
case " $FLAGS " in *" --device "*) DEVICE=$(echo "$FLAGS" | sed 's/.*--device \([^ ]*\).*/\1/') ;; *) FLAGS="$FLAGS --device cpu" ;; esac
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export OPENBLAS_NUM_THREADS="$THREADS" OMP_NUM_THREADS="$THREADS"
mkdir -p "$OUT"

cmake -S "$ROOT" -B "$ROOT/build" >/dev/null
cmake --build "$ROOT/build" --target ctimm-bench -j2 >/dev/null
. "$ROOT/bench/timm_script.sh"
timm_script benchmark.py
# Model by model, timm then ctimm, ROUNDS times: this VM's speed drifts by
# tens of percent over minutes, so each ratio compares two runs a few
# seconds apart, and the table gives the median of the rounds' ratios. Each
# side runs the model twice in one process, and a round takes each side's
# faster run: PyTorch's first model in a process ran up to 2x slower than
# the next (test_vit inference, bench/NOTES.md), and either run of either
# side can land in one of this VM's slow spells, so both sides count at
# their best.
echo "timm's benchmark.py and ctimm-bench, model by model ($FLAGS, $THREADS threads, $ROUNDS rounds) ..." >&2
r=1
while [ "$r" -le "$ROUNDS" ]; do
    grep -v '^[[:space:]]*\(#\|$\)' "$LIST" | while read -r model _; do
        printf '%s\n%s\n' "$model" "$model" >"$OUT/twice.txt"
        # shellcheck disable=SC2086
        PYTHONPATH=$TIMM "$PYTHON" "$OUT/timm_benchmark.py" --model-list "$OUT/twice.txt" $FLAGS \
            --results-file "$OUT/timm.$r.$model.csv" >>"$OUT/timm.log" 2>&1 || { tail -5 "$OUT/timm.log" >&2; exit 1; }
        # shellcheck disable=SC2086
        "$ROOT/build/ctimm-bench" --model-list "$OUT/twice.txt" $FLAGS --results-file "$OUT/ctimm.$r.$model.csv" \
            >>"$OUT/ctimm.log" 2>&1 || { tail -5 "$OUT/ctimm.log" >&2; exit 1; }
    done || exit 1
    r=$((r + 1))
done

# one row per model and bench: both sides' median samples/s and the median
# of the rounds' ratios (with their range, over more than one round)
for f in "$OUT"/timm.*.csv "$OUT"/ctimm.*.csv; do echo "$f"; done | awk -F, -v rounds="$ROUNDS" '
function median(list,   a, n, i, j, t) {
    n = split(list, a, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{
    file = $0; base = file; sub(/.*\//, "", base)
    side = base; sub(/\..*/, "", side)
    round = base; sub(/^[a-z]+\./, "", round); sub(/\..*/, "", round)
    n = 0
    while ((getline line < file) > 0) {
        sub(/\r$/, "", line)
        k = split(line, f, ",")
        if (++n == 1) { for (i = 1; i <= k; i++) h[i] = f[i]; continue }
        models[f[1]] = 1
        for (i = 1; i <= k; i++) {
            key = side SUBSEP round SUBSEP f[1] SUBSEP h[i]
            if (h[i] !~ /samples_per_sec$/ || !(key in v) || f[i] + 0 > v[key] + 0) v[key] = f[i]
        }
    }
    close(file)
}
END {
    printf "%-26s %-6s %12s %12s %8s %s\n", "model", "bench", "timm/s", "ctimm/s", "ratio", (rounds > 1 ? " rounds" : "")
    for (m in models) for (b = 0; b < 2; b++) {
        key = b ? "train_samples_per_sec" : "infer_samples_per_sec"
        ts = cs = rs = ""; lo = 1e30; hi = 0
        for (r = 1; r <= rounds; r++) {
            t = v["timm", r, m, key]; c = v["ctimm", r, m, key]
            if (t != "") ts = ts " " t
            if (c != "") cs = cs " " c
            if (t != "" && c != "" && t > 0) {
                x = c / t; rs = rs " " x
                lo = x < lo ? x : lo; hi = x > hi ? x : hi
            }
        }
        if (ts == "" && cs == "") continue
        printf "%-26s %-6s %12s %12s %8s %s\n", m, b ? "train" : "infer", ts == "" ? "-" : sprintf("%.2f", median(ts)),
            cs == "" ? "-" : sprintf("%.2f", median(cs)), rs == "" ? "-" : sprintf("%.2fx", median(rs)),
            (rounds > 1 && rs != "" ? sprintf(" %.2f-%.2f", lo, hi) : "")
    }
}' | { read -r header; echo "$header"; sort; }
echo "(CSVs and logs in $OUT; device $DEVICE; CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1))" >&2
