#!/usr/bin/env bash
# The GPU check of issue 10, in one call on the lent device machine (see
# tools/prepare_gpu_check.sh for the exact `run` call and what travels):
#
#   1. unpack the Debian packages ctimm builds with (.gpu-deps/*.deb, fetched
#      here by tools/prepare_gpu_check.sh) into a prefix, build ctimm there
#      against the machine's own CUDA toolkit and cuDNN (build-gpu/);
#   2. ctest -L gpu (tests/gpu: cuda against ref, graph replay, memcheck)
#      and the cuda unit tests;
#   3. ctimm-bench --device cuda, timm's benchmark.py eager, and with
#      --torchcompile, on bench/gpu_set.csv (the 13-model set at the batch
#      sizes of timm's published CSVs): train and inference, --amp,
#      --channels-last, few steps;
#   4. the side-by-side table (bench/gpu_table.awk), printed last.
#
# torch.compile's compilation is the slow part: it is started first, in the
# background, for the target models (inductor's cache on disk), while ctimm
# builds and the GPU tests run; nothing is timed until it has finished. A
# total budget (GPU_CHECK_BUDGET seconds, default 560) skips the runs that
# would not fit; each shows as "skipped" in the table.
#
# Environment: OUT (the device tool's folder that comes back; gets
# gpu_check.log, table.txt and logs.tar.gz), GPU_CHECK_BUDGET,
# GPU_CHECK_PHASES (default "build test ctimm eager compile"),
# GPU_CHECK_ITERS (timed steps, default 15), GPU_CHECK_COMPILE_MODELS (the
# models measured with torch.compile, default issue 10's five targets).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
T0=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET:-560}
PHASES=" ${GPU_CHECK_PHASES:-build test ctimm eager compile} "
ITERS=${GPU_CHECK_ITERS:-15}
TARGETS=${GPU_CHECK_COMPILE_MODELS:-resnet50,vit_base_patch16_224,vit_base_patch32_384,efficientnet_b0,convnext_tiny}
DEPS=$ROOT/.gpu-deps
OUT=${OUT:-/tmp/gpu_check_out}
WORK=/tmp/gpu_check
BUILD=${GPU_CHECK_BUILD:-$ROOT/build-gpu}
PREFIX=/tmp/ctimm-deps
mkdir -p "$OUT" "$WORK"
find "$WORK" -maxdepth 1 -type f -delete # a warm machine's last run; inductor's cache stays
LOG=$OUT/gpu_check.log
: >"$LOG"
export TORCHINDUCTOR_CACHE_DIR=$WORK/inductor PYTHONUNBUFFERED=1

elapsed() { echo $(($(date +%s) - T0)); }
left() { echo $((BUDGET - $(elapsed))); }
# a timeout of at least 5 s (timeout 0 would mean none)
cap() { if [ "$1" -lt 5 ]; then echo 5; else echo "$1"; fi; }
say() { echo "gpu_check [$(elapsed) s] $*" | tee -a "$LOG"; }
has() { case $PHASES in *" $1 "*) return 0 ;; esac; return 1; }
pack() { tar -czf "$OUT/logs.tar.gz" -C "$WORK" --exclude inductor . 2>/dev/null; }
trap pack EXIT

say "machine: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
say "tools: $(nvcc --version 2>&1 | tail -1); cmake $(cmake --version 2>&1 | head -1 | cut -d' ' -f3);" \
    "cc $(cc -dumpfullversion 2>&1); ninja $(ninja --version 2>&1)"
say "python: $(python3 -c 'import torch, timm; print("torch", torch.__version__, "timm", timm.__version__)' 2>&1 | tail -1)"

# timm's benchmark.py travels in .gpu-deps (the pip package does not ship it)
BENCHPY=$DEPS/benchmark.py
PRE_PIDS=""
if has compile && [ -f "$BENCHPY" ]; then
    # two compilers side by side, the targets split between them
    IFS=, read -ra T <<<"$TARGETS"
    half=$(((${#T[@]} + 1) / 2))
    A=$(IFS=,; echo "${T[*]:0:half}") B=$(IFS=,; echo "${T[*]:half}")
    for part in "$A" "$B"; do
        [ -n "$part" ] || continue
        timeout $((BUDGET / 2)) nice -n 10 python3 bench/timm_gpu_bench.py --benchmark-py "$BENCHPY" \
            --set bench/gpu_set.csv --models "$part" --benches train --torchcompile --warm 1 --iters 1 \
            --out "$WORK/precompile.csv" >>"$WORK/precompile.log" 2>&1 &
        PRE_PIDS="$PRE_PIDS $!"
    done
    say "torch.compile precompiling $TARGETS in the background"
fi

# 1. the Debian packages into $PREFIX, their .pc files pointed there
if has build; then
    rm -rf "$PREFIX" && mkdir -p "$PREFIX"
    for f in "$DEPS"/*.deb; do dpkg -x "$f" "$PREFIX" || { say "dpkg -x $f failed"; exit 1; }; done
    find "$PREFIX" -name '*.pc' -exec sed -i "s|=/usr|=$PREFIX/usr|" {} +
    LIBDIR=$PREFIX/usr/lib/x86_64-linux-gnu
    export PKG_CONFIG_PATH=$LIBDIR/pkgconfig:$LIBDIR/openblas-openmp/pkgconfig
    export LD_LIBRARY_PATH=$LIBDIR:$LIBDIR/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    command -v pkg-config >/dev/null || export PKG_CONFIG=$PREFIX/usr/bin/pkg-config
    # Open MPI from the prefix, named to FindMPI directly (its mpicc wrapper has /usr built in)
    export OPAL_PREFIX=$PREFIX/usr
    # and OpenBLAS's OpenMP build, which CMakeLists.txt looks for in /usr only
    MPI="-DMPI_C_COMPILER=NOTFOUND -DMPI_C_HEADER_DIR=$LIBDIR/openmpi/include -DMPI_C_LIB_NAMES=mpi
         -DMPI_mpi_LIBRARY=$LIBDIR/libmpi.so.40 -DMPIEXEC_EXECUTABLE=$PREFIX/usr/bin/orterun
         -DOPENBLAS_LIB=$LIBDIR/openblas-openmp/libopenblas.so
         -DOPENBLAS_INCLUDE=$PREFIX/usr/include/x86_64-linux-gnu/openblas-openmp"
    # cuBLASLt and cuDNN: the toolkit's, else the pip wheels' (torch's), found by file
    NV=$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null)
    root_of() { [ -n "$NV" ] && find "$NV" -name "$1" 2>/dev/null | head -1 | xargs -r dirname | xargs -r dirname; }
    CUBLAS_ROOT=$(root_of 'cublasLt.h') CUDNN_ROOT=$(root_of 'cudnn.h')
    GEN=""
    command -v ninja >/dev/null && GEN="-G Ninja"
    # shellcheck disable=SC2086
    if ! cmake -S . -B "$BUILD" $GEN $MPI -DCMAKE_BUILD_TYPE=Release ${CUDNN_ROOT:+-DCTIMM_CUDNN_ROOT=$CUDNN_ROOT} \
        ${CUBLAS_ROOT:+-DCTIMM_CUBLAS_ROOT=$CUBLAS_ROOT} \
        >"$WORK/configure.log" 2>&1; then
        say "configure failed:"; tail -20 "$WORK/configure.log" | tee -a "$LOG"; exit 1
    fi
    grep "ctimm:" "$WORK/configure.log" | tee -a "$LOG"
    if ! cmake --build "$BUILD" -j 12 >"$WORK/build.log" 2>&1; then
        say "build failed:"; grep -m 20 -E "error|Error" "$WORK/build.log" | tee -a "$LOG"; exit 1
    fi
    say "built"
fi

# 2. the GPU tests
if has test; then
    timeout "$(cap $(($(left) / 3)))" ctest --test-dir "$BUILD" -L gpu -R . --output-on-failure \
        >"$WORK/ctest_gpu.log" 2>&1
    timeout 120 ctest --test-dir "$BUILD" -R '^test_(cuda|nvrtc|lib_|launch_plan)' --output-on-failure \
        >"$WORK/ctest_cuda.log" 2>&1
    say "tests:"; grep -h -E "tests passed|Passed|Failed|Skipped|Not Run|\*\*\*" "$WORK"/ctest_gpu.log \
        "$WORK"/ctest_cuda.log | tee -a "$LOG"
fi

# nothing is timed while torch.compile is still compiling
for p in $PRE_PIDS; do wait "$p"; done
if [ -n "$PRE_PIDS" ]; then
    n=$(grep -c ',train,[0-9]' "$WORK/precompile.csv" 2>/dev/null)
    say "precompiled: ${n:-0} of the targets"
fi

HEADER=model,bench,samples_per_sec,step_time_ms,batch_size,img_size,error
for f in eager compiled ctimm; do [ -s "$WORK/$f.csv" ] || echo "$HEADER" >"$WORK/$f.csv"; done

# 3a. ctimm-bench, one run per (model, bench): the batch sizes differ
if has ctimm; then
    stop=$(($(date +%s) + 150)) # the first versions of the library kernels are slow: a cap
    [ $stop -gt $((T0 + BUDGET - 240)) ] && stop=$((T0 + BUDGET - 240))
    grep -v '^#' bench/gpu_set.csv | while IFS=, read -r m img tbs ibs; do
        for b in train inference; do
            bs=$tbs; [ $b = inference ] && bs=$ibs
            if [ "$(date +%s)" -ge $stop ]; then echo "$m,$b,,,$bs,$img,skipped: budget" >>"$WORK/ctimm.csv"; continue; fi
            rm -f "$WORK/one.csv"
            timeout 60 "$BUILD/ctimm-bench" -m "$m" --bench $b -b "$bs" --img-size "$img" --amp --channels-last \
                --device cuda --num-warm-iter 2 --num-bench-iter 5 --results-file "$WORK/one.csv" \
                </dev/null >>"$WORK/ctimm.log" 2>"$WORK/one.err"
            cat "$WORK/one.err" >>"$WORK/ctimm.log"
            if [ -s "$WORK/one.csv" ]; then
                awk -F, -v b=$b -v img="$img" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
                    { p = (b == "train" ? "train_" : "infer_")
                      print $c["model"] "," b "," $c[p "samples_per_sec"] "," $c[p "step_time"] "," \
                            $c[p "batch_size"] "," img "," }' "$WORK/one.csv" >>"$WORK/ctimm.csv"
            else
                echo "$m,$b,,,$bs,$img,$(tail -1 "$WORK/one.err" | tr -d ',' | cut -c1-200)" >>"$WORK/ctimm.csv"
            fi
        done
    done
    say "ctimm-bench done"
fi

# 3b. timm eager, then 3c. torch.compile (the precompiled targets: cache hits)
if has eager && [ -f "$BENCHPY" ]; then
    timeout "$(cap $(($(left) - 100)))" python3 bench/timm_gpu_bench.py --benchmark-py "$BENCHPY" --set bench/gpu_set.csv \
        --iters "$ITERS" --deadline $((T0 + BUDGET - 120)) --est 10 --out "$WORK/eager.csv" >"$WORK/eager.log" 2>&1
    say "timm eager done"
fi
if has compile && [ -f "$BENCHPY" ]; then
    timeout "$(cap $(($(left) - 10)))" python3 bench/timm_gpu_bench.py --benchmark-py "$BENCHPY" --set bench/gpu_set.csv \
        --models "$TARGETS" --benches train,inference --torchcompile --iters "$ITERS" \
        --deadline $((T0 + BUDGET - 15)) --est 25 --out "$WORK/compiled.csv" >"$WORK/compiled.log" 2>&1
    say "timm torch.compile done"
fi
[ -f "$BENCHPY" ] || say "no $BENCHPY: run tools/prepare_gpu_check.sh before the call"

# 4. the table, last
{
    echo "== ctimm vs timm on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)," \
        "--amp --channels-last, samples/s over $ITERS timed steps (ctimm: 5) =="
    awk -f bench/gpu_table.awk "$WORK/eager.csv" "$WORK/compiled.csv" "$WORK/ctimm.csv"
} >"$OUT/table.txt"
say "total $(elapsed) s"
cat "$OUT/table.txt"
