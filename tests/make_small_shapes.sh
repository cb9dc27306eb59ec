#!/bin/sh
# make_small_shapes.sh SRC DST NTRAIN NVAL: an ImageFolder of the first NTRAIN
# train and NVAL val images of each class of SRC (the generated shapes set),
# for the trainer tests whose point is the loop's bookkeeping, not accuracy:
# a tenth of the data keeps them cheap under the sanitizers.
set -eu
src=$1 dst=$2
rm -rf "$dst"
for split in train:$3 val:$4; do
    name=${split%%:*} n=${split#*:}
    for class in "$src/$name"/*/; do
        out="$dst/$name/$(basename "$class")"
        mkdir -p "$out"
        ls "$class" | sort | head -n "$n" | while read -r f; do cp "$class$f" "$out/"; done
    done
done
