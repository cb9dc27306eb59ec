#!/bin/sh
# train_signals.sh TRAIN [FLAGS...]: how a training run takes signals.
# SIGINT and SIGTERM are blocked in every thread but one, which takes them
# (a handler that ran on a thread inside oneDNN's JIT GEMM would push its
# frame into the heap); a crash (here SIGABRT, as glibc's heap checks end
# one) says so on stderr with a backtrace and still ends the process by
# its signal (exit status 134).
set -e
train=$1
shift
rm -rf sig.log
"$train" "$@" --epochs 1 --log-interval 1 > sig.log 2>&1 &
pid=$!
tries=0
until grep -q '^Train: 0 \[   2/' sig.log 2>/dev/null; do
    tries=$((tries + 1))
    [ $tries -lt 3000 ] || { echo "train_signals: the run never reached batch 2" >&2; kill -9 $pid; exit 1; }
    sleep 0.1
done
threads=0
open=0
for st in /proc/$pid/task/*/status; do
    blk=$(sed -n 's/^SigBlk:[[:space:]]*//p' "$st" 2>/dev/null) || continue # a thread that just ended
    [ -n "$blk" ] || continue
    threads=$((threads + 1))
    # SIGINT is bit 1, SIGTERM bit 14
    [ $(( 0x$blk & 0x4002 )) -eq $(( 0x4002 )) ] || open=$((open + 1))
done
[ "$threads" -ge 3 ] && [ "$open" -eq 1 ] || {
    echo "train_signals: $open of $threads threads take SIGINT/SIGTERM, want exactly 1" >&2; kill -9 $pid; exit 1; }
kill -ABRT $pid
rc=0
wait $pid || rc=$?
[ "$rc" -eq 134 ] || { echo "train_signals: exit status $rc after SIGABRT, want 134" >&2; cat sig.log; exit 1; }
grep -q '^ctimm-train: crashed with SIGABRT: a bug in ctimm' sig.log || { cat sig.log; exit 1; }
grep -q 'ctimm-train(' sig.log || { echo "train_signals: no frame of ctimm-train in the trace" >&2; cat sig.log; exit 1; }
echo "train_signals: $threads threads, one takes SIGINT/SIGTERM; the crash reported with $(grep -c '(' sig.log) frames"
