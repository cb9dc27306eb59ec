#!/bin/sh
# train_interrupt.sh TRAIN [FLAGS...]: Ctrl-C and the recovery checkpoint.
# An uninterrupted one-epoch run (a) against the same run (b) that gets a
# SIGINT mid-epoch (after batch 20 has been logged), exits 130 and leaves one
# recovery pair, then is resumed from it (c): b's steps and c's together
# equal a's, bit for bit (loss, running mean, LR, loss scale), and so do
# summary.csv (b's and c's, the resumed run writing to intr-b-1) and the
# final weights. Run with -j 1 and one OpenBLAS thread.
set -e
train=$1
shift
rm -rf intr-a intr-b intr-b-* intr-a.log intr-b.log intr-c.log
strip() { grep -E '^(Train|Test)' "$1" | sed -e 's/Time:.*LR/LR/' -e 's/  Data: [0-9.]*//' -e 's/Time: [0-9.]*s//'; }
"$train" "$@" --epochs 1 --log-interval 1 --output intr-a > intr-a.log
"$train" "$@" --epochs 1 --log-interval 1 --output intr-b --recovery-interval 7 > intr-b.log 2>&1 &
pid=$!
tries=0
until grep -q '^Train: 0 \[  20/' intr-b.log 2>/dev/null; do
    tries=$((tries + 1))
    [ $tries -lt 3000 ] || { echo "train_interrupt: the run never reached batch 20" >&2; kill $pid; exit 1; }
    sleep 0.1
done
kill -INT $pid
rc=0
wait $pid || rc=$?
[ "$rc" -eq 130 ] || { echo "train_interrupt: exit status $rc after SIGINT, want 130" >&2; cat intr-b.log; exit 1; }
grep -q '^Interrupted at epoch 0, batch .*; resume with --resume intr-b/recovery-0-' intr-b.log
[ "$(ls intr-b/recovery-*.state.safetensors | wc -l)" -eq 1 ] || { echo "train_interrupt: not exactly one recovery pair" >&2; ls intr-b; exit 1; }
rec=$(ls intr-b/recovery-*.state.safetensors | sed 's/\.state\.safetensors$/.safetensors/')
"$train" "$@" --epochs 1 --log-interval 1 --output intr-b --resume "$rec" > intr-c.log
grep -q 'batches done); starting at epoch 0, batch ' intr-c.log
grep -q '^Output: intr-b-1 ' intr-c.log
strip intr-a.log > intr-a.steps
{ strip intr-b.log; strip intr-c.log; } > intr-bc.steps
diff intr-a.steps intr-bc.steps
tail -n +2 intr-b-1/summary.csv | cat intr-b/summary.csv - | cmp intr-a/summary.csv -
cmp intr-a/last.safetensors intr-b-1/last.safetensors
echo "train_interrupt: resumed from $rec, equal to the uninterrupted run"
