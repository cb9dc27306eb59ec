#!/bin/sh
# The loader benchmark: ctimm's bench_loader against timm's own loader
# (bench/loader_timm.py) over the same folder of real photos, same thread
# counts, then a side-by-side table. See bench/NOTES.md for the results.
#
# Needs: Debian's python3-torch and python3-skimage (for the photos), timm at
# $TIMM (default /opt/timm). The photo folder (scratch data, outside the
# repository) is made once by make_photo_folder.py and reused.
#
# Settings (environment): FOLDER (/tmp/ctimm_bench_photos), N (1000 images),
# THREADS (1,2), EPOCHS (3 timed epochs each), ROUNDS (1: how many times the
# pair is run, alternating; the table takes the median over rounds),
# MAKE_PHOTOS (/work/shared/tools/make_photo_folder.py), TIMM (/opt/timm).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FOLDER=${FOLDER:-/tmp/ctimm_bench_photos}
N=${N:-1000}
THREADS=${THREADS:-1,2}
EPOCHS=${EPOCHS:-3}
ROUNDS=${ROUNDS:-1}
MAKE_PHOTOS=${MAKE_PHOTOS:-/work/shared/tools/make_photo_folder.py}
TIMM=${TIMM:-/opt/timm}
# the machine's BLAS tuning variables change torch's threading: neither side gets them
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE

if [ ! -f "$FOLDER.summary.json" ] || ! grep -q "\"n_images\": $N," "$FOLDER.summary.json" || [ ! -d "$FOLDER" ]; then
    if ! /usr/bin/python3 -c 'import skimage' 2>/dev/null; then
        echo "run_loader.sh: the photos need Debian's python3-skimage: apt-get install python3-skimage" >&2
        exit 1
    fi
    echo "making $N photos in $FOLDER" >&2
    rm -f "$FOLDER.summary.json"
    /usr/bin/python3 "$MAKE_PHOTOS" --out "$FOLDER" --n "$N" >"$FOLDER.summary.tmp"
    mv "$FOLDER.summary.tmp" "$FOLDER.summary.json"
fi

cmake -S "$ROOT" -B "$ROOT/build" >/dev/null
cmake --build "$ROOT/build" --target bench_loader -j2 >/dev/null

out=$(mktemp -d /tmp/ctimm_run_loader.XXXXXX)
trap 'rm -rf "$out"' EXIT
echo "photos: $(tr -d '\n ' <"$FOLDER.summary.json" | sed 's/"sources":\[[^]]*\],//')"
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$ROOT/build/bench/bench_loader" --folder "$FOLDER" --breakdown --threads 1 --epochs 1 --pipeline none |
    grep breakdown
r=1
while [ "$r" -le "$ROUNDS" ]; do
    "$ROOT/build/bench/bench_loader" --folder "$FOLDER" --threads "$THREADS" --epochs "$EPOCHS" | tee -a "$out/runs.txt"
    PYTHONPATH=$TIMM /usr/bin/python3 -W ignore "$ROOT/bench/loader_timm.py" --folder "$FOLDER" --threads "$THREADS" \
        --epochs "$EPOCHS" | tee -a "$out/runs.txt"
    r=$((r + 1))
done

/usr/bin/python3 - "$out/runs.txt" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 3 or f[0] not in ('ctimm', 'timm'):
        continue
    kv = dict(x.split('=', 1) for x in f[2:])
    key = (f[0], f[1], int(kv['threads']))
    runs.setdefault(key, []).append((float(kv['img_per_s']), float(kv['cpu_s_per_img'].rstrip('ms'))))
print()
print('| pipeline | threads | ctimm img/s | timm img/s | ratio | ctimm CPU ms/img | timm CPU ms/img | ratio per core |')
print('|---|---|---|---|---|---|---|---|')
for pipe in ('train', 'eval'):
    for t in sorted({k[2] for k in runs if k[1] == pipe}):
        c, m = runs.get(('ctimm', pipe, t)), runs.get(('timm', pipe, t))
        if not c or not m:
            continue
        ci, mi = statistics.median(x[0] for x in c), statistics.median(x[0] for x in m)
        cc, mc = statistics.median(x[1] for x in c), statistics.median(x[1] for x in m)
        print(f'| {pipe} | {t} | {ci:.0f} | {mi:.0f} | {ci / mi:.2f}x | {cc:.2f} | {mc:.2f} | {mc / cc:.2f}x |')
EOF
