#!/bin/sh
# ctimm-bench against timm's own benchmark.py: the same model list, bench
# mode, batch size, precision, layout, device and thread count, in one run,
# then one table joined on the model column with ctimm / timm per model.
#
#   bench/compare.sh [MODEL_LIST] [-- extra flags for both, e.g. --bench train -b 32 --amp]
#
# Defaults: bench/benchmark_set.txt, --bench inference -b 1, --device cpu on a
# machine without a GPU (cuda where there is one and ctimm has the backend).
# Environment: THREADS (2: torch.set_num_threads and OpenBLAS/OpenMP threads,
# for both sides), TIMM (/opt/timm: the pip package), TIMM_REPO (timm's git
# repository, for benchmark.py, which the package does not ship; default the
# mirror in /work/.mirror), PYTHON (/usr/bin/python3: Debian's torch), OUT
# (a folder for the two CSVs and the logs; default a temporary one).
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for both sides alike.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LIST=$ROOT/bench/benchmark_set.txt
if [ $# -gt 0 ] && [ "$1" != "--" ]; then LIST=$1; shift; fi
[ $# -gt 0 ] && [ "$1" = "--" ] && shift
FLAGS=${*:-"--bench inference -b 1"}
THREADS=${THREADS:-2}
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
echo "timm's benchmark.py ($FLAGS, $THREADS threads) ..." >&2
# shellcheck disable=SC2086
PYTHONPATH=$TIMM "$PYTHON" "$OUT/timm_benchmark.py" --model-list "$LIST" $FLAGS --results-file "$OUT/timm.csv" \
    >"$OUT/timm.log" 2>&1 || { tail -5 "$OUT/timm.log" >&2; exit 1; }
echo "ctimm-bench ($FLAGS, $THREADS threads) ..." >&2
# shellcheck disable=SC2086
"$ROOT/build/ctimm-bench" --model-list "$LIST" $FLAGS --results-file "$OUT/ctimm.csv" >"$OUT/ctimm.log" 2>&1 ||
    { tail -5 "$OUT/ctimm.log" >&2; exit 1; }

# one row per model: both sides' samples/s (infer and train where measured) and the ratio
awk -F, '
function load(file, side,   line, n, i, h, f, k) {
    n = 0
    while ((getline line < file) > 0) {
        sub(/\r$/, "", line)
        k = split(line, f, ",")
        if (++n == 1) { for (i = 1; i <= k; i++) h[i] = f[i]; continue }
        models[f[1]] = 1
        for (i = 1; i <= k; i++) v[side, f[1], h[i]] = f[i]
    }
}
BEGIN {
    load(ARGV[1], "timm"); load(ARGV[2], "ctimm")
    printf "%-26s %-6s %12s %12s %8s\n", "model", "bench", "timm/s", "ctimm/s", "ratio"
    for (m in models) for (b = 0; b < 2; b++) {
        key = b ? "train_samples_per_sec" : "infer_samples_per_sec"
        t = v["timm", m, key]; c = v["ctimm", m, key]
        if (t == "" && c == "") continue
        printf "%-26s %-6s %12s %12s %8s\n", m, b ? "train" : "infer", t == "" ? "-" : t, c == "" ? "-" : c,
            (t != "" && c != "" && t > 0) ? sprintf("%.2fx", c / t) : "-"
    }
}' "$OUT/timm.csv" "$OUT/ctimm.csv" | { read -r header; echo "$header"; sort; }
echo "(CSVs and logs in $OUT; device $DEVICE)" >&2
