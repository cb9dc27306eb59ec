#!/usr/bin/env bash
# The GPU check (issue 21), in stages, for one call on a lent device machine:
#
#   env       the machine: GPU, driver, glibc, toolkit, cmake, python, torch, timm,
#             the pip wheels' NVIDIA libraries, which pkg-config modules exist
#   deps      the carried Debian packages (.gpu-deps/*.deb, tools/prepare_gpu_check.sh)
#             unpacked into a prefix, for the modules the machine lacks; the carried
#             kernel images (.gpu-deps/kernel-cache.tar.gz) into the kernel cache
#   configure cmake against the machine's toolkit, else the pip wheels' NVRTC,
#             cuBLASLt and cuDNN; MPI optional
#   build     the GPU tests, the probe, ctimm-train and ctimm-bench
#   probe     ctimm-gpu-probe: one PASS/FAIL line per primitive (a failing
#             convolution with batch norm sums: the later stages run
#             CTIMM_CONV_STATS=kernel)
#   parity    ctest -L gpu -j8: cuda against ref, one test per configuration; the
#             failed ones again with CTIMM_ATTENTION=simt (the ViTs' 16-bit) and
#             CTIMM_CUDA_STEPS=plain, the later stages run so where that passes
#   train     the README's main job with --device cuda, then under AMP channels-last
#             (and, with TRAIN_CPU=1, then on the cpu)
#   steps     one training step's device time per step (CTIMM_CUDA_PROFILE), and
#             the roofline floors of its plan (ctimm-compile --roofline h200, or h100 on one), of
#             test_resnet, resnet50 and vit_base_patch16_224 at batch 64 (STEPS_BATCH)
#   bench     timm's benchmark.py eager, ctimm-bench --device cuda, then (COMPILE=1)
#             timm's --torchcompile, on $BENCH_SET (default bench/gpu_first.csv;
#             bench/gpu_issue22.csv is issue 22's table); the side-by-side table
#             with the peaks of device memory ($OUT/table.txt) last
#
# Every stage has its own time limit inside the total budget, and the moment
# it ends appends `stage,rc,seconds,note` to $OUT/summary.csv and re-renders
# $OUT/summary.txt; a failing stage never ends the script (the stages after
# a failed build are skipped, saying so). Logs go to $OUT/logs.tar.gz after
# every stage, so a call cut short still brings them back.
#
#   bash bench/gpu_check.sh [--dry-run] [--budget SECONDS] [--build-dir DIR] [--stages "env deps ..."]
#
# --budget: the whole run's seconds (default 420: a 15-minute device lease
# then leaves room for a second call). --dry-run: on a machine without a GPU,
# every stage that needs none runs (configure into a scratch folder, the
# probe's and the tests' no-GPU paths, timm_gpu_bench.py's argument checks),
# and ctimm's side of the train, steps and bench stages runs on the fake GPU
# (tests/fake_gpu, where the build has it: every model compiled, loaded and
# stepped as on the device, every call checked as a device checks it; its
# times are not measurements, and the steps stage takes test_resnet alone
# unless STEPS_MODELS says); CI runs it (ctest gpu_check_dry_run) against
# its own build (--build-dir).
# Environment: OUT (default /tmp/gpu_check_out), TRAIN_CPU=1 (the train
# stage also on the cpu backend), STEPS_MODELS (the steps stage's
# "model:img_size[:VAR=value]" list: a setting of the product's for that
# run and its roofline, as CTIMM_DWCONV=lib or cudnn), BENCH_SET and COMPILE=1 (the bench stage's set,
# and timm with torch.compile too), BENCH_CTIMM_S (ctimm's share of the
# bench stage, default 100 s; torch.compile gets what is left of BENCH_CAP,
# default 200), STEPS_BATCH and STEPS_CAP (the steps stage's batch, default 64, and
# seconds, default 120), AMP_DTYPE (float16, the default of both
# benchmarks, or bfloat16: issue 22's table is AMP_DTYPE=bfloat16
# BENCH_SET=bench/gpu_issue22.csv COMPILE=1).
set -uo pipefail
CALLER=$PWD
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
DRY=0
BUDGET=420
BUILD=""
STAGES="env deps configure build probe parity train steps bench"
while [ $# -gt 0 ]; do
    case $1 in
    --dry-run) DRY=1 ;;
    --budget) BUDGET=$2; shift ;;
    --build-dir) BUILD=$2; shift ;;
    --stages) STAGES=$2; shift ;;
    *) echo "gpu_check: unknown argument '$1' (usage: bench/gpu_check.sh [--dry-run] [--budget S] [--build-dir DIR] [--stages LIST])" >&2
       exit 2 ;;
    esac
    shift
done
case $BUDGET in '' | *[!0-9]*) echo "gpu_check: --budget takes whole seconds, not '$BUDGET'" >&2; exit 2 ;; esac
T0=$(date +%s)
OUT=${OUT:-/tmp/gpu_check_out}
WORK=${GPU_CHECK_WORK:-/tmp/gpu_check}
BUILD=${BUILD:-$ROOT/build-gpu}
case $BUILD in /*) ;; *) BUILD=$CALLER/$BUILD ;; esac # the stages run from other folders
PREFIX=$WORK/prefix
DEPS=$ROOT/.gpu-deps
mkdir -p "$OUT" "$WORK/logs"
rm -f "$OUT/summary.csv" "$OUT/summary.txt" "$WORK"/logs/*
echo "stage,rc,seconds,note" >"$OUT/summary.csv"
# what every stage's shell starts from: the kernel cache shared (the dry
# run's, the caller's: CI's two builds compile the fake GPU's kernels once),
# the paths found by env and deps
ENVSH=$WORK/env.sh
{
    [ "$DRY" = 1 ] || echo "export XDG_CACHE_HOME=$WORK/cache"
    echo "export PYTHONUNBUFFERED=1"
    echo "export PATH=\$PATH:/usr/local/cuda/bin"
} >"$ENVSH"
export ROOT WORK BUILD PREFIX DEPS DRY ENVSH OUT

elapsed() { echo $(($(date +%s) - T0)); }
pack() { tar -czf "$OUT/logs.tar.gz" -C "$WORK" logs env.sh 2>/dev/null; }
render() {
    column -t -s, "$OUT/summary.csv" >"$OUT/summary.txt" 2>/dev/null || cp "$OUT/summary.csv" "$OUT/summary.txt"
}
record() { # stage rc seconds note
    local note
    note=$(printf '%s' "$4" | tr ',\n' '; ' | cut -c1-200)
    echo "$1,$2,$3,$note" >>"$OUT/summary.csv"
    echo "gpu_check [$(elapsed) s] $1: rc $2 in $3 s: $note"
    render
    pack
}
# stage NAME CAP: runs the function st_NAME in a shell of its own under
# min(CAP, what the budget has left) seconds; its note is the last line it
# writes to $WORK/logs/NAME.note, else its log's last line.
SKIP_REST=""
stage() {
    local name=$1 cap=$2 left t0 rc note
    case " $STAGES " in *" $name "*) ;; *) return ;; esac
    if [ -n "$SKIP_REST" ]; then record "$name" - 0 "skipped: $SKIP_REST"; return; fi
    left=$((BUDGET - $(elapsed) - 5))
    [ "$cap" -gt "$left" ] && cap=$left
    if [ "$cap" -lt 5 ]; then record "$name" - 0 "skipped: budget"; return; fi
    t0=$(date +%s)
    export STAGE_DEADLINE=$((t0 + cap))
    timeout -k 5 "$cap" bash -c "source '$ENVSH'; st_$name" >"$WORK/logs/$name.log" 2>&1
    rc=$?
    [ $rc -eq 124 ] && echo "timed out after $cap s" >>"$WORK/logs/$name.note"
    note=$(tail -n 1 "$WORK/logs/$name.note" 2>/dev/null)
    [ -n "$note" ] || note=$(grep -v '^\s*$' "$WORK/logs/$name.log" | tail -n 1)
    record "$name" "$rc" $(($(date +%s) - t0)) "$note"
    return $rc
}
note() { echo "$*" >>"$WORK/logs/${STAGE_NAME:-x}.note"; }
export -f note

st_env() {
    STAGE_NAME='env'
    echo "uname: $(uname -srm)"; echo "glibc: $(ldd --version 2>&1 | head -1)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) x $(nproc)"
    echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"
    echo "nvcc: $(nvcc --version 2>&1 | tail -1)"
    echo "cmake: $(cmake --version 2>&1 | head -1); ninja $(ninja --version 2>&1); cc $(cc -dumpfullversion 2>&1)"
    local py nv
    py=$(python3 -c 'import sys, torch, timm; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "timm", timm.__version__)' 2>&1 | tail -1)
    echo "python: $py"
    nv=$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null)
    echo "pip nvidia: ${nv:-none}"
    [ -n "$nv" ] && ls "$nv"/*/lib 2>/dev/null | head -60
    for m in libcjson libturbojpeg libjpeg libpng libxxhash yaml-0.1 zlib; do
        echo "pkg-config $m: $(pkg-config --modversion $m 2>&1 | head -1)"
    done
    ls /usr/local/cuda/lib64/libcublasLt.so* /usr/local/cuda/lib64/libnvrtc.so* /usr/local/cuda/lib64/libcudnn.so* 2>&1
    # the pip wheels' NVIDIA libraries on the loader path (cuDNN 9 opens its sub-libraries by name)
    if [ -n "$nv" ]; then
        local libs
        libs=$(ls -d "$nv"/*/lib 2>/dev/null | tr '\n' ':')
        echo "export LD_LIBRARY_PATH=${libs}\${LD_LIBRARY_PATH:-}" >>"$ENVSH"
        root() { find "$nv" -path "*/include/$1" 2>/dev/null | head -1 | xargs -r dirname | xargs -r dirname; }
        echo "export CUBLAS_ROOT=$(root cublasLt.h) CUDNN_ROOT=$(root cudnn.h) NVRTC_ROOT=$(root nvrtc.h)" >>"$ENVSH"
    fi
    note "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || true)" \
        "$(ldd --version 2>&1 | head -1 | grep -o '[0-9.]*$'); python $py"
    [ "$DRY" = 1 ] || nvidia-smi >/dev/null
}

st_deps() {
    STAGE_NAME=deps
    local missing="" m carried=""
    # the library kernels compiled for sm_90 here (tools/prepare_gpu_check.sh): cache entries,
    # each checked byte for byte against what the lease asks, so a different NVRTC only misses
    if [ "$DRY" != 1 ] && [ -f "$DEPS/kernel-cache.tar.gz" ]; then
        mkdir -p "$WORK/cache" &&
            carried="; $(tar -xzvf "$DEPS/kernel-cache.tar.gz" -C "$WORK/cache" | grep -c '[0-9a-f]$') kernel images carried"
    fi
    for m in libcjson libturbojpeg libjpeg libpng libxxhash yaml-0.1; do
        pkg-config --exists $m 2>/dev/null || missing="$missing $m"
    done
    if ! ls "$DEPS"/*.deb >/dev/null 2>&1; then
        note "no carried .debs; the machine lacks:${missing:- nothing}$carried"
        [ -z "$missing" ]
        return
    fi
    rm -rf "$PREFIX" && mkdir -p "$PREFIX"
    for f in "$DEPS"/*.deb; do dpkg -x "$f" "$PREFIX" || { note "dpkg -x $f failed"; return 1; }; done
    find "$PREFIX" -name '*.pc' -exec sed -i "s|=/usr|=$PREFIX/usr|" {} +
    local lib=$PREFIX/usr/lib/x86_64-linux-gnu
    {
        echo "export PKG_CONFIG_PATH=$lib/pkgconfig:$PREFIX/usr/share/pkgconfig\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}"
        echo "export LD_LIBRARY_PATH=$lib:$lib/openblas-openmp:\${LD_LIBRARY_PATH:-}"
        echo "export OPENBLAS_FLAGS='-DOPENBLAS_LIB=$lib/openblas-openmp/libopenblas.so -DOPENBLAS_INCLUDE=$PREFIX/usr/include/x86_64-linux-gnu/openblas-openmp'"
        command -v pkg-config >/dev/null || echo "export PKG_CONFIG=$PREFIX/usr/bin/pkg-config"
    } >>"$ENVSH"
    note "$(ls "$DEPS"/*.deb | wc -l) packages unpacked; the machine lacked:${missing:- nothing}$carried"
}

st_configure() {
    STAGE_NAME=configure
    local dir=$BUILD gen=""
    # the dry run configures a scratch folder with these flags; it builds nothing there
    [ "$DRY" = 1 ] && dir=$WORK/configure-dry && rm -rf "$dir"
    [ "$DRY" = 1 ] || [ ! -f "$BUILD/CMakeCache.txt" ] || [ -n "${RECONFIGURE:-}" ] || { note "configured already"; return 0; }
    command -v ninja >/dev/null && gen="-G Ninja"
    # shellcheck disable=SC2086
    cmake -S "$ROOT" -B "$dir" $gen -DCMAKE_BUILD_TYPE=Release ${OPENBLAS_FLAGS:-} \
        ${CUBLAS_ROOT:+-DCTIMM_CUBLAS_ROOT=$CUBLAS_ROOT} ${CUDNN_ROOT:+-DCTIMM_CUDNN_ROOT=$CUDNN_ROOT} \
        ${NVRTC_ROOT:+-DCTIMM_NVRTC_ROOT=$NVRTC_ROOT} || { note "cmake failed: $(grep -m1 'CMake Error' -A2 "$WORK/logs/configure.log" | tr '\n' ' ')"; return 1; }
    grep -q "CTIMM_HAVE_CUDA_LIBS" "$dir/CMakeCache.txt" 2>/dev/null
    if grep -q "the cuda backend is not built\|CUDA toolkit not found" "$WORK/logs/configure.log"; then
        note "configured without the cuda backend: $(grep 'ctimm:' "$WORK/logs/configure.log" | tr '\n' ' ')"
        return 1
    fi
    note "$(grep -o 'ctimm: cuBLASLt.*' "$WORK/logs/configure.log" | head -1)"
}

GPU_TARGETS="ctimm-gpu-probe test_gpu_parity ctimm-train ctimm-bench ctimm-compile"
st_build() {
    STAGE_NAME=build
    if [ "$DRY" = 1 ] && [ ! -f "$BUILD/CMakeCache.txt" ]; then note "dry run: no --build-dir to build in"; return 0; fi
    # shellcheck disable=SC2086
    cmake --build "$BUILD" -j "$(nproc)" --target $GPU_TARGETS || { note "build failed: $(grep -m3 -E 'error|Error' "$WORK/logs/build.log" | tr '\n' ' ')"; return 1; }
    note "built $GPU_TARGETS"
}

st_probe() {
    STAGE_NAME=probe
    local rc
    "$BUILD/ctimm-gpu-probe"
    rc=$?
    note "$(grep -c '^PASS' "$WORK/logs/probe.log") passed, $(grep -c '^FAIL' "$WORK/logs/probe.log") failed: $(grep '^FAIL' "$WORK/logs/probe.log" | head -3 | cut -c6-90 | tr '\n' '|')"
    # without a GPU the probe's whole answer is its first line, which must say why
    [ "$DRY" = 1 ] && { grep -q '^FAIL driver and device' "$WORK/logs/probe.log" || grep -q '^FAIL build' "$WORK/logs/probe.log"; return; }
    # a cuBLASLt line failing: again on the heuristics' choices, untimed; where
    # every cuBLASLt GEMM passes so, the later stages take them too
    # (CTIMM_LIB_CHOICE=heuristic), so that the timing costs the lease no table
    if grep -q '^FAIL cuBLASLt' "$WORK/logs/probe.log"; then
        CTIMM_LIB_CHOICE=heuristic "$BUILD/ctimm-gpu-probe" >"$WORK/logs/probe_heuristic.log" 2>&1
        if grep -q '^PASS cuBLASLt' "$WORK/logs/probe_heuristic.log" &&
            ! grep -q '^FAIL cuBLASLt' "$WORK/logs/probe_heuristic.log"; then
            echo "export CTIMM_LIB_CHOICE=heuristic" >>"$ENVSH"
            note "cuBLASLt failed timed and passed on the heuristics' choices: the later stages run CTIMM_LIB_CHOICE=heuristic"
        else
            note "cuBLASLt fails on the heuristics' choices too: $(grep '^FAIL cuBLASLt' "$WORK/logs/probe_heuristic.log" | head -2 | cut -c6-90 | tr '\n' '|')"
        fi
    fi
    # cuDNN's convolution with its batch norm's sums (the graph API's plan,
    # first run on this device) wrong: the later stages sum them by the
    # library's pass after the plain call
    if grep -q '^FAIL cuDNN .*batch norm sums' "$WORK/logs/probe.log"; then
        echo "export CTIMM_CONV_STATS=kernel" >>"$ENVSH"
        note "cuDNN's convolution with GenStats failed: the later stages run CTIMM_CONV_STATS=kernel"
    fi
    return $rc
}

st_parity() {
    STAGE_NAME=parity
    ctest --test-dir "$BUILD" -L gpu -j 8 --timeout 120 --output-on-failure
    local rc=$? failed vit16='gpu_test_vit_[a-z]+_(f16|bf16)'
    failed=$(grep -E '\*\*\*(Failed|Timeout|Exception)' "$WORK/logs/parity.log" | awk '{print $4}' | sort -u)
    note "$(grep -E 'tests passed|tests failed' "$WORK/logs/parity.log" | tail -1); failed: $(echo "$failed" | head -8 | tr '\n' ' ')"
    # a ViT's 16-bit step failing: again with attention on the SIMT tiles,
    # which tells the tensor cores' kernels apart from the rest of the step
    if echo "$failed" | grep -qE "^$vit16\$"; then
        CTIMM_ATTENTION=simt ctest --test-dir "$BUILD" -L gpu -R 'vit_[a-z]+_(f16|bf16)$' -j 8 --timeout 120 \
            >"$WORK/logs/parity_simt.log" 2>&1
        local fb
        fb=$(fall_back parity_simt CTIMM_ATTENTION=simt)
        note "the ViTs' 16-bit tests with CTIMM_ATTENTION=simt: $(grep -E 'tests passed|tests failed' "$WORK/logs/parity_simt.log" | tail -1)$fb"
        [ -n "$fb" ] && failed=$(echo "$failed" | grep -vE "^$vit16\$")
    fi
    # what else fails, again with plain steps (no library step spanning
    # others, no kept batch norm coefficients): the launch plan's fusions
    # told apart from the kernels themselves
    failed=$(echo "$failed" | grep . | tr '\n' '|')
    if [ -n "$failed" ]; then
        # shellcheck disable=SC1090
        (source "$ENVSH"; CTIMM_CUDA_STEPS=plain ctest --test-dir "$BUILD" -L gpu -R "^(${failed%|})\$" -j 8 \
            --timeout 120 --output-on-failure) >"$WORK/logs/parity_plain.log" 2>&1
        note "failed: ${failed%|}; again with CTIMM_CUDA_STEPS=plain: $(grep -E 'tests passed|tests failed' "$WORK/logs/parity_plain.log" | tail -1)$(fall_back parity_plain CTIMM_CUDA_STEPS=plain)"
    fi
    return $rc
}
# fall_back LOG SETTING: where the retry of LOG passed every test it ran,
# the later stages run SETTING (their table then times steps that compute
# the right thing), and the note says so.
fall_back() {
    grep -q '^100% tests passed' "$WORK/logs/$1.log" || return 0
    echo "export $2" >>"$ENVSH"
    printf '; the later stages run %s' "$2"
}

# The dry run's device: the fake GPU, for ctimm's commands alone (prefixed
# with $ON_FAKE: cuDNN, linked into them, comes from the fake by
# LD_PRELOAD; a sanitised build's fake brings its sanitiser's runtime,
# which is then not the first library); 1 where the build has none.
fake_gpu() {
    local lib=$BUILD/tests/fake_gpu/libctimm_fake_gpu.so
    [ -f "$lib" ] || { note "dry run: needs a GPU (no fake GPU in $BUILD)"; return 1; }
    ON_FAKE="env CTIMM_LIBCUDA=$lib CTIMM_LIBCUBLASLT=$lib LD_PRELOAD=$lib ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
}

# The README's main job on the GPU, then the same under AMP (the bench's
# --amp-dtype, channels-last: the fused 16-bit batch norm gradients, which
# the parity stage compares in eval only, trained end to end), then
# (TRAIN_CPU=1) on the cpu backend: the top-1 of the last epoch of each.
# Not side by side: two processes' OpenMP pools on the same cores starve
# each other.
st_train() {
    STAGE_NAME=train
    local ON_FAKE=""
    if [ "$DRY" = 1 ]; then fake_gpu || return 0; fi
    local t="$ON_FAKE $BUILD/ctimm-train --model test_resnet --epochs 8 --lr 0.1" rc amp=${AMP_DTYPE:-float16}
    # float16's loss scaler stops a run whose gradients are never finite, as
    # they are not on a fake that computes nothing
    [ -n "$ON_FAKE" ] && amp=bfloat16
    (cd "$WORK" && $t --device cuda --output "$WORK/train-cuda")
    rc=$?
    top1() { grep -o 'Acc@1: [0-9.]*' "$1" | tail -1; }
    (cd "$WORK" && $t --device cuda --amp --amp-dtype "$amp" --channels-last \
        --output "$WORK/train-cuda-amp" >"$WORK/logs/train_amp.log" 2>&1) || rc=$?
    local got
    got="cuda $(top1 "$WORK/logs/train.log"), cuda amp $amp channels-last $(top1 "$WORK/logs/train_amp.log")"
    if [ -n "$ON_FAKE" ]; then # the fake computes nothing: the runs' top-1 says nothing either
        if [ "$rc" = 0 ]; then note "dry run: both trainings ran on the fake GPU"
        else note "dry run: a training failed on the fake GPU (rc $rc; train.log, train_amp.log)"; fi
        [ "$rc" = 0 ] && ! grep -q '^fake GPU: ' "$WORK/logs/train.log" "$WORK/logs/train_amp.log"
        return
    fi
    note "last epoch's top-1: $got"
    if [ "${TRAIN_CPU:-0}" = 1 ]; then
        (cd "$WORK" && $t --device cpu --output "$WORK/train-cpu" >"$WORK/logs/train_cpu.log" 2>&1)
        note "last epoch's top-1: $got, cpu $(top1 "$WORK/logs/train_cpu.log")"
    fi
    return $rc
}

# One training step's device time per step (runtime/cuda/step_profile.h) of
# test_resnet and the two batch-64 models: where the time goes.
st_steps() {
    STAGE_NAME=steps
    local m img roof=h200 ON_FAKE="" models=${STEPS_MODELS:-test_resnet:160 resnet50:224 vit_base_patch16_224:224}
    if [ "$DRY" = 1 ]; then
        fake_gpu || return 0
        models=${STEPS_MODELS:-test_resnet:160}
    fi
    local bs=${STEPS_BATCH:-64}
    case $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1) in *H100*) roof=h100 ;; esac
    for m in $models; do
        set -- ${m//:/ }
        m=$1 img=$2
        echo "== $m train, batch $bs, --amp --channels-last${3:+, $3}"
        env ${3:+"$3"} CTIMM_CUDA_PROFILE=1 timeout 60 $ON_FAKE "$BUILD/ctimm-bench" -m "$m" --bench train -b "$bs" --img-size "$img" --amp \
            --amp-dtype "${AMP_DTYPE:-float16}" --channels-last --device cuda --num-warm-iter 1 --num-bench-iter 2 </dev/null 2>&1 | grep -v '^Benchmark\|^Train \[' \
            || echo "$m: rc $?"
        # the floors of the same model's plan as ctimm-compile makes it (codegen/cuda/roofline.h)
        env ${3:+"$3"} "$BUILD/ctimm-compile" --model "$m" --train --batch-size "$bs" --img-size "$img" --amp \
            --amp-dtype "${AMP_DTYPE:-float16}" --channels-last --roofline "$roof" | sed -n '/^total:/,$p'
    done
    note "$(grep -c 'cuda profile, the mean' "$WORK/logs/steps.log") profiles in steps.log${ON_FAKE:+, on the fake GPU}"
    [ -z "$ON_FAKE" ] || ! grep -q '^fake GPU: ' "$WORK/logs/steps.log"
}

# timm's benchmark.py eager, then ctimm-bench --device cuda, on bench/gpu_first.csv
# (--amp --channels-last both); the side-by-side table is made at the end.
st_bench() {
    STAGE_NAME=bench
    local set=${BENCH_SET:-$ROOT/bench/gpu_first.csv} bpy=$DEPS/benchmark.py ON_FAKE=""
    if [ "$DRY" = 1 ]; then
        python3 "$ROOT/bench/timm_gpu_bench.py" --benchmark-py "${bpy}" --set "$set" --iters 10 --dry-run \
            --amp-dtype "${AMP_DTYPE:-float16}" --out "$WORK/logs/eager.csv" || return 1
        python3 "$ROOT/bench/timm_gpu_bench.py" --benchmark-py "${bpy}" --set "$set" --iters 10 --torchcompile \
            --amp-dtype "${AMP_DTYPE:-float16}" --dry-run --out "$WORK/logs/compiled.csv" || return 1
        note "dry run: timm_gpu_bench.py's arguments checked"
        fake_gpu || return 0
    fi
    [ "$DRY" = 0 ] && [ -f "$bpy" ] && python3 "$ROOT/bench/timm_gpu_bench.py" --benchmark-py "$bpy" --set "$set" --iters 10 --warm 3 \
        --amp-dtype "${AMP_DTYPE:-float16}" --deadline $(($(date +%s) + 80)) --est 8 --out "$WORK/logs/eager.csv"
    echo "model,bench,samples_per_sec,step_time_ms,batch_size,img_size,error,peak_alloc_mib" >"$WORK/logs/ctimm.csv"
    # a row starts only where it can end (its timeout) before the stage's own
    # deadline: a row cut off would take the stage and its table with it; the
    # dry run's rows compile the kernels on a CI host's loaded cores
    local stop=$(($(date +%s) + ${BENCH_CTIMM_S:-100})) row_s=60
    [ -n "$ON_FAKE" ] && row_s=100
    # every model's training row first (issue 22's targets), then inference's
    for b in train inference; do
        grep -v '^#' "$set" | while IFS=, read -r m img tbs ibs; do
            local bs=$tbs one=$WORK/one.csv
            [ $b = inference ] && bs=$ibs
            if [ "$(date +%s)" -ge $stop ] || [ $(($(date +%s) + row_s)) -gt $((STAGE_DEADLINE - 5)) ]; then
                echo "$m,$b,,,$bs,$img,skipped: budget" >>"$WORK/logs/ctimm.csv"
                continue
            fi
            rm -f "$one"
            timeout $row_s $ON_FAKE "$BUILD/ctimm-bench" -m "$m" --bench $b -b "$bs" --img-size "$img" --amp \
                --amp-dtype "${AMP_DTYPE:-float16}" --channels-last \
                --device cuda --num-warm-iter 2 --num-bench-iter 5 --results-file "$one" </dev/null \
                >>"$WORK/logs/ctimm.log" 2>"$WORK/one.err"
            local rc=$?
            cat "$WORK/one.err" >>"$WORK/logs/ctimm.log"
            if [ -s "$one" ]; then
                awk -F, -v b=$b -v img="$img" '{ sub(/\r$/, "") } NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
                    { p = (b == "train" ? "train_" : "infer_")
                      print $c["model"] "," b "," $c[p "samples_per_sec"] "," $c[p "step_time"] "," \
                            $c[p "batch_size"] "," img ",," $c[p "peak_device_mib"] }' "$one" >>"$WORK/logs/ctimm.csv"
            else
                echo "$m,$b,,,$bs,$img,rc $rc: $(tail -1 "$WORK/one.err" | tr -d ',' | cut -c1-160)" >>"$WORK/logs/ctimm.csv"
            fi
        done
    done
    # torch.compile last, with what the stage has left: its compiles are the slowest runs here
    if [ "$DRY" = 0 ] && [ -f "$bpy" ] && [ "${COMPILE:-0}" = 1 ]; then
        python3 "$ROOT/bench/timm_gpu_bench.py" --benchmark-py "$bpy" --set "$set" --iters 10 --warm 3 \
            --amp-dtype "${AMP_DTYPE:-float16}" --torchcompile --deadline $((STAGE_DEADLINE - 5)) --est 40 --out "$WORK/logs/compiled.csv"
    fi
    if [ -n "$ON_FAKE" ]; then # a row that failed, or a call the fake refused, fails the dry run
        note "dry run: timm_gpu_bench.py's arguments checked; ctimm on the fake GPU:" \
            "$(awk -F, 'NR > 1 && $7 == ""' "$WORK/logs/ctimm.csv" | wc -l) rows ran," \
            "$(grep -c ',skipped: budget' "$WORK/logs/ctimm.csv") skipped for the budget"
        ! grep -q '^fake GPU: ' "$WORK/logs/ctimm.log" &&
            ! awk -F, 'NR > 1 && $7 != "" && $7 != "skipped: budget"' "$WORK/logs/ctimm.csv" | grep -q .
        return
    fi
    note "timm eager $(($(grep -c . "$WORK/logs/eager.csv" 2>/dev/null || echo 1) - 1)) rows, ctimm $(($(grep -c . "$WORK/logs/ctimm.csv") - 1)) rows, compiled $(($(grep -c . "$WORK/logs/compiled.csv" 2>/dev/null || echo 1) - 1)) rows"
}
export -f st_env st_deps st_configure st_build st_probe st_parity st_train st_steps st_bench fall_back fake_gpu
export GPU_TARGETS

stage env 30
stage deps 40
stage configure 90 || SKIP_REST="the configure failed"
stage build 240 || SKIP_REST=${SKIP_REST:-"the build failed"}
stage probe 150
stage parity 200
stage train 120
stage steps "${STEPS_CAP:-120}"
stage bench "${BENCH_CAP:-200}"
HDR=model,bench,samples_per_sec,step_time_ms,batch_size,img_size,error,peak_alloc_mib
for f in eager compiled ctimm; do [ -s "$WORK/logs/$f.csv" ] || echo "$HDR" >"$WORK/logs/$f.csv"; done
{
    echo "== ctimm vs timm on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)," \
        "--amp ${AMP_DTYPE:-float16} --channels-last, samples/s ($(basename "${BENCH_SET:-bench/gpu_first.csv}")) =="
    # what the probe and parity stages fell back to, which ctimm's rows ran with
    fell=$(grep -o 'CTIMM_[A-Z_]*=[a-z]*' "$ENVSH" | tr '\n' ' ')
    [ -z "$fell" ] || echo "ctimm with ${fell% }"
    awk -f "$ROOT/bench/gpu_table.awk" "$WORK/logs/eager.csv" "$WORK/logs/compiled.csv" "$WORK/logs/ctimm.csv"
} >"$OUT/table.txt" 2>&1
pack
echo "gpu_check: total $(elapsed) s of $BUDGET; $OUT/summary.txt:"
cat "$OUT/summary.txt"
grep -h '^FAIL' "$WORK/logs/probe.log" 2>/dev/null | head -20
[ "$DRY" = 1 ] || cat "$OUT/table.txt"
! grep -v '^stage' "$OUT/summary.csv" | awk -F, '$2 != "0" && $2 != "-"' | grep -q .
