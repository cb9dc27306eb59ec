#!/bin/sh
# compile_interrupt.sh NAME N PATTERN CMD [ARGS...]: a SIGINT while the cpu
# backend's C compiler runs its Nth compile ends it at once. CMD runs on a
# cold, private kernel cache ($CTIMM_CACHE_DIR) and temporary folder
# ($TMPDIR), with a compiler ($CTIMM_CC) that sleeps before its Nth kernel
# compile; it gets the SIGINT once that compile has started and must exit
# 130 within a few seconds with PATTERN (grep -E) in its output, leaving no
# compiler process (the wrapper's process group) and no temporary file.
# CMD's output stays in ./NAME.log; ./NAME.tmp is its scratch folder.
set -e
n=$2
pattern=$3
work=$PWD/$1.tmp
log=$PWD/$1.log
shift 3
rm -rf "$work" "$log"
mkdir -p "$work/tmp"
# The wrapper notes its pid (its process group: `sleep` and cc run in it),
# then waits long enough that only the SIGINT can end the compile early.
cat > "$work/cc" <<EOF
#!/bin/sh
case " \$* " in *" -o "*)
    k=\$(( \$(cat "$work/count" 2>/dev/null || echo 0) + 1 )); echo \$k > "$work/count"
    if [ \$k -eq $n ]; then echo \$\$ > "$work/compiling"; sleep 120; fi ;;
esac
exec cc "\$@"
EOF
chmod +x "$work/cc"
CTIMM_CC="$work/cc" CTIMM_CACHE_DIR="$work/cache" TMPDIR="$work/tmp" "$@" > "$log" 2>&1 &
pid=$!
tries=0
until [ -s "$work/compiling" ]; do
    tries=$((tries + 1))
    if [ $tries -ge 1200 ] || ! kill -0 $pid 2>/dev/null; then
        echo "compile_interrupt: compile $n never started" >&2
        kill $pid 2>/dev/null || true
        cat "$log"
        exit 1
    fi
    sleep 0.1
done
cc_group=$(cat "$work/compiling")
kill -INT $pid
tries=0
while kill -0 $pid 2>/dev/null; do
    tries=$((tries + 1))
    if [ $tries -ge 100 ]; then
        echo "compile_interrupt: still running 10 s after SIGINT" >&2
        kill -9 $pid -"$cc_group" 2>/dev/null || true
        cat "$log"
        exit 1
    fi
    sleep 0.1
done
rc=0
wait $pid || rc=$?
cat "$log"
[ "$rc" -eq 130 ] || { echo "compile_interrupt: exit status $rc after SIGINT, want 130" >&2; exit 1; }
grep -Eq -- "$pattern" "$log" || { echo "compile_interrupt: output lacks /$pattern/" >&2; exit 1; }
left=$(ps -eo pgid=,stat=,args= | awk -v g="$cc_group" '$1 == g && $2 !~ /^Z/')
[ -z "$left" ] || { echo "compile_interrupt: compiler processes left: $left" >&2; exit 1; }
if [ -n "$(ls -A "$work/tmp")" ]; then
    echo "compile_interrupt: temporary files left:" >&2
    ls -lA "$work/tmp" >&2
    exit 1
fi
if [ -d "$work/cache" ] && ls "$work/cache" | grep -q '\.tmp\.'; then
    echo "compile_interrupt: cache temporary files left" >&2
    exit 1
fi
if grep -Eq 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$log"; then
    echo "compile_interrupt: the sanitizers reported an error" >&2
    exit 1
fi
rm -rf "$work"
echo "compile_interrupt: exit 130 at compile $n, nothing left behind"
