#!/bin/sh
# Rewrites README.md's table of timm train.py's flags (between its
# "train-flags:" markers): each flag of tests/data/train_py_flags.txt
# (tools/make_args_yaml.py --flags) with what ctimm-train --list-flags says
# of it: accepted, taken with no effect, or refused, and why.
#   tools/readme_train_flags.sh [BUILD_DIR]          rewrite README.md
#   tools/readme_train_flags.sh --print [BUILD_DIR]  print the table only
# Fails naming any train.py flag ctimm-train does not know (CTest
# train_py_flags), and CTest readme_train_flags fails while README differs.
set -eu
print=0
if [ "${1:-}" = --print ]; then print=1; shift; fi
build=${1:-build}
cd "$(dirname "$0")/.."
known=$(mktemp)
trap 'rm -f "$known"' EXIT
"$build/ctimm-train" --list-flags > "$known"
table=$(awk -F '\t' '
    NR == FNR { what[$1] = $2; next }
    {
        n = split($1, opts, " "); shown = ""; status = ""
        for (i = 1; i <= n; i++) {
            shown = shown (i > 1 ? ", " : "") "`" opts[i] "`"
            if (status == "" && (opts[i] in what)) status = what[opts[i]]
        }
        if (status == "") { print "train.py flag " $1 " is unknown to ctimm-train" > "/dev/stderr"; bad = 1 }
        gsub(/\|/, "\\|", status)
        print "| " shown " | `" $3 "` | " status " |"
    }
    END { exit bad }' "$known" tests/data/train_py_flags.txt)
table=$(printf '| train.py flag | its default | ctimm-train |\n|---|---|---|\n%s' "$table")
if [ $print = 1 ]; then
    printf '%s\n' "$table"
    exit 0
fi
awk -v table="$table" '
    /<!-- train-flags: / { print; print table; skip = 1; next }
    /<!-- \/train-flags -->/ { skip = 0 }
    !skip' README.md > README.md.tmp
mv README.md.tmp README.md
