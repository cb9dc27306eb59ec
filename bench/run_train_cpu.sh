#!/bin/sh
# The cpu-backend training throughput benchmark (issue 8): ctimm's
# bench_train_step (bench/train_step.c) against timm's own benchmark.py
# (`--device cpu --bench train`, run through bench/train_timm.py, which calls
# it unchanged) on Debian's python3-torch, same model, batch, image size and
# thread count, alternating, then a side-by-side table. Also the wall time of
# `ctimm-compile --model vit_base_patch32_384 --train --amp`, cold (empty
# CTIMM_CACHE_DIR) and warm (the same command again). See bench/NOTES.md.
#
# Cases: test_resnet, test_vit, test_efficientnet, test_convnext at batch 32
# and their default 160 px (pretrained_cfg input_size), resnet18 at 224,
# batch 8 (passed to benchmark.py as --img-size 224: by default it would run
# at resnet18's test_input_size, 288).
#
# Torch's BLAS: Debian's torch calls libblas.so.3; its OpenMP build
# (libopenblas0-openmp) shares torch's OpenMP thread pool. When the system's
# libblas.so.3 alternative is another one, torch's process (only) gets the
# OpenMP build through LD_LIBRARY_PATH; the libraries it really loaded are
# printed. ctimm uses the libopenblas.so.0 it was linked against (the OpenMP
# build too: CMakeLists.txt).
#
# Settings (environment): THREADS (the online CPUs: torch.set_num_threads,
# OMP_NUM_THREADS, which ctimm's compiled kernels (-fopenmp) follow too, and
# OPENBLAS_NUM_THREADS, for both; on a busy machine use THREADS=1, see
# NOTES.md), WARMUP (3) and STEPS (15) per run (benchmark.py's defaults are
# 10 and 40: ~3x longer),
# ROUNDS (1: timm/ctimm pairs per case; the table takes medians), CASES
# ("model:batch:img ..." to run a subset), GEMM (1024: the N of the f32
# matmul probe on both sides, 0 for none), TIMM (/opt/timm),
# TIMM_REPO (the timm git mirror benchmark.py is taken from),
# BUILD (build-bench: the build directory, configured and built here).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
NCPU=$(getconf _NPROCESSORS_ONLN) # (nproc would follow OMP_NUM_THREADS)
THREADS=${THREADS:-$NCPU}
WARMUP=${WARMUP:-3}
STEPS=${STEPS:-15}
ROUNDS=${ROUNDS:-1}
CASES=${CASES:-"test_resnet:32:160 test_vit:32:160 test_efficientnet:32:160 test_convnext:32:160 resnet18:8:224"}
GEMM=${GEMM:-1024}
TIMM=${TIMM:-/opt/timm}
TIMM_REPO=${TIMM_REPO:-/work/.mirror/huggingface+pytorch-image-models/repo}
BUILD=${BUILD:-$ROOT/build-bench}
# the machine's BLAS tuning variables change torch's threading: neither side gets them
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS

if [ "$STEPS" -lt 5 ]; then
    echo "run_train_cpu.sh: STEPS must be >= 5 (benchmark.py logs every STEPS/5 steps)" >&2
    exit 1
fi
OMP_BLAS=/usr/lib/x86_64-linux-gnu/openblas-openmp
if [ ! -e "$OMP_BLAS/libblas.so.3" ]; then
    echo "run_train_cpu.sh: torch's BLAS should be OpenBLAS's OpenMP build: apt-get install libopenblas0-openmp" >&2
    exit 1
fi
TORCH_LD=
case "$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)" in
"$OMP_BLAS"/*) ;;
*) TORCH_LD=$OMP_BLAS ;;
esac

cmake -S "$ROOT" -B "$BUILD" >/dev/null
cmake --build "$BUILD" --target bench_train_step ctimm-compile -j2 >/dev/null

out=$(mktemp -d /tmp/ctimm_run_train.XXXXXX)
trap 'rm -rf "$out"' EXIT
git -C "$TIMM_REPO" show HEAD:benchmark.py >"$out/benchmark.py"
# a fresh kernel cache: each model's first step compiles its kernels (cold)
export CTIMM_CACHE_DIR="$out/cache"

echo "machine: $NCPU cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "threads: $THREADS, warmup $WARMUP, steps $STEPS, rounds $ROUNDS; timm benchmark.py from $(git -C "$TIMM_REPO" rev-parse --short HEAD)"
echo "ctimm BLAS: $(ldd "$BUILD/bench/bench_train_step" | grep -o '/[^ ]*openblas[^ ]*' | xargs -r readlink -f | tr '\n' ' ')"
echo "torch BLAS: libblas.so.3 -> $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)${TORCH_LD:+, LD_LIBRARY_PATH=$TORCH_LD for torch}"

# each run's result line goes to the screen and runs.txt; a failed run's last
# lines of stderr to the screen, and the other runs go on
timm_run() { # model batch img gemm
    if LD_LIBRARY_PATH=${TORCH_LD}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} PYTHONPATH=$TIMM /usr/bin/python3 -W ignore \
        "$ROOT/bench/train_timm.py" "$out/benchmark.py" --threads "$THREADS" --gemm "$4" -- \
        --device cpu --bench train --model "$1" -b "$2" --img-size "$3" --num-warm-iter "$WARMUP" \
        --num-bench-iter "$STEPS" --no-retry >"$out/run.out" 2>"$out/run.err"; then
        grep '^# torch' "$out/run.err" || true
        tee -a "$out/runs.txt" <"$out/run.out"
    else
        tail -5 "$out/run.err"
    fi
}

ctimm_run() { # model batch img
    if "$BUILD/bench/bench_train_step" --model "$1" --batch-size "$2" --img-size "$3" --warmup "$WARMUP" \
        --steps "$STEPS" >"$out/run.out" 2>"$out/run.err"; then
        tee -a "$out/runs.txt" <"$out/run.out"
    else
        tail -3 "$out/run.err"
    fi
}

if [ "$GEMM" -gt 0 ]; then
    "$BUILD/bench/bench_train_step" --gemm "$GEMM" | tee -a "$out/runs.txt"
fi
first=1
r=1
while [ "$r" -le "$ROUNDS" ]; do
    for c in $CASES; do
        IFS=: read -r model batch img <<EOF
$c
EOF
        g=0
        [ "$first" = 1 ] && g=$GEMM
        first=0
        timm_run "$model" "$batch" "$img" "$g"
        ctimm_run "$model" "$batch" "$img"
    done
    r=$((r + 1))
done

# ctimm-compile, cold then warm, its own empty cache directory
cc_cache="$out/compile-cache"
mkdir -p "$cc_cache"
for run in cold warm; do
    t0=$(date +%s%N)
    CTIMM_CACHE_DIR=$cc_cache "$BUILD/ctimm-compile" --model vit_base_patch32_384 --train --amp >"$out/compile.txt"
    t1=$(date +%s%N)
    echo "ctimm-compile $run wall_ms=$(( (t1 - t0) / 1000000 )) cache_entries=$(find "$cc_cache" -type f | wc -l) $(grep '^kernels:' "$out/compile.txt")"
done

/usr/bin/python3 - "$out/runs.txt" <<'EOF'
import statistics, sys
runs, gemm = {}, {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 3 or f[0] not in ('ctimm', 'timm') or f[1] not in ('train', 'gemm'):
        continue
    kv = dict(x.split('=', 1) for x in f[2:])
    if f[1] == 'gemm':
        gemm[f[0]] = kv
        continue
    runs.setdefault((f[0], kv['model'], int(kv['batch']), int(kv['img'])), []).append(kv)
med = lambda rs, k: statistics.median(float(r[k]) for r in rs) if rs else float('nan')
if gemm:
    print()
    print('f32 GEMM n x n x n, the ceiling: ' + ', '.join(
        f'{k} {v["gflop_per_s"]} GFLOP/s (n={v["n"]}, {v["threads"]} threads)' for k, v in sorted(gemm.items())))
print()
print('| model | batch | img | timm samples/s | ctimm samples/s | ratio | timm CPU ms/step | ctimm CPU ms/step '
      '| ratio per core | GFLOP/step | timm GFLOP/s | ctimm GFLOP/s | ctimm 1st step s, cold / warm cache |')
print('|---|---|---|---|---|---|---|---|---|---|---|---|---|')
for key in dict.fromkeys((k[1:] for k in runs)):
    c, t = runs.get(('ctimm',) + key, []), runs.get(('timm',) + key, [])
    cs, ts = med(c, 'samples_per_s'), med(t, 'samples_per_s')
    cc, tc = med(c, 'cpu_ms_per_step'), med(t, 'cpu_ms_per_step')
    gf = float(c[0]['gflop_per_step']) if c else float('nan')
    b = key[1]
    print(f'| {key[0]} | {b} | {key[2]} | {ts:.2f} | {cs:.2f} | {cs / ts:.2f}x | {tc:.0f} | {cc:.0f} | {tc / cc:.2f}x '
          f'| {gf:.2f} | {gf * ts / b:.1f} | {gf * cs / b:.1f} '
          f'| {" / ".join(r["first_step_s"] for r in c[:2]) if c else "-"} |')
EOF
