# shellcheck shell=sh
# Sourced by bench/compare.sh and bench/e2e_train.sh: timm_script NAME
# copies timm's NAME (benchmark.py, train.py: scripts the pip package does
# not ship) from $TIMM_REPO (a checkout, or a bare mirror's HEAD) into $OUT
# and writes $OUT/timm_NAME, which runs it with torch.set_num_threads($THREADS),
# as PyTorch here starts with one thread. Exits the caller when NAME is missing.
timm_script() {
    if [ -f "$TIMM_REPO/$1" ]; then
        cp "$TIMM_REPO/$1" "$OUT/$1"
    elif ! git -C "$TIMM_REPO" show "HEAD:$1" >"$OUT/$1" 2>/dev/null; then
        echo "$(basename "$0"): timm's $1 not found in $TIMM_REPO (set TIMM_REPO to a timm checkout)" >&2
        exit 1
    fi
    cat >"$OUT/timm_$1" <<PY
import runpy, sys, torch
torch.set_num_threads($THREADS)
sys.argv = ["$1"] + sys.argv[1:]
runpy.run_path("$OUT/$1", run_name="__main__")
PY
}
