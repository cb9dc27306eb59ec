#!/bin/sh
# Rewrites README.md's model list (between its "models:" markers) from the
# registry: tools/readme_models.sh [BUILD_DIR]. CTest readme_model_list
# fails while the two differ.
set -eu
build=${1:-build}
cd "$(dirname "$0")/.."
list=$("$build/ctimm-compile" --list-models | paste -sd, - | sed 's/,/, /g' | fold -s -w 94 | sed 's/ *$//; s/^/  /')
awk -v list="$list" '
    /<!-- models: / { print; print list; skip = 1; next }
    /<!-- \/models -->/ { skip = 0 }
    !skip' README.md > README.md.tmp
mv README.md.tmp README.md
