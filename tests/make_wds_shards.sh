#!/bin/sh
# make_wds_shards.sh SRC DST: WebDataset shards (as webdataset's ShardWriter
# writes them: KEY.cls then KEY.jpg, consecutive, in ustar tars) of the
# generated shapes set SRC (an ImageFolder of 10 classes): 10 train shards of
# 6 samples (the first 6 images of each class, classes dealt round-robin), with
# timm's _info.json naming them; 2 val shards of 10, given to the trainer as
# the pattern 'shapes-val-{000000..000001}.tar|20' (no info entry).
set -eu
src=$1 dst=$2
rm -rf "$dst"
mkdir -p "$dst/stage"
classes=$(ls "$src/train" | sort)
for spec in train:6:6 val:2:10; do
    split=${spec%%:*} rest=${spec#*:}
    per_class=${rest%%:*} per_shard=${rest#*:}
    # the split's images, class index beside each: k-th image of every class, then the (k+1)-th
    list=$dst/stage/$split.list
    : > "$list"
    k=1
    while [ $k -le "$per_class" ]; do
        c=0
        for class in $classes; do
            echo "$c $src/$split/$class/$(ls "$src/$split/$class" | sort | sed -n "${k}p")" >> "$list"
            c=$((c + 1))
        done
        k=$((k + 1))
    done
    j=0
    while read -r label path; do
        shard=$(printf '%06d' $((j / per_shard)))
        key=$(printf '%s_%05d' "$split" $j)
        mkdir -p "$dst/stage/$split-$shard"
        printf '%s\n' "$label" > "$dst/stage/$split-$shard/$key.cls"
        cp "$path" "$dst/stage/$split-$shard/$key.jpg"
        j=$((j + 1))
    done < "$list"
    for d in "$dst/stage/$split"-*/; do
        name=$(basename "$d")
        (cd "$d" && tar --format=ustar -cf "../../shapes-$name.tar" $(ls | sort))
    done
done
n=$(ls "$dst"/shapes-train-*.tar | wc -l)
files=$(cd "$dst" && ls shapes-train-*.tar | sed 's/.*/"&"/' | paste -sd, -)
lengths=$(yes 6 | head -n "$n" | paste -sd, -)
printf '{"name": "shapes", "splits": {"train": {"name": "train", "num_samples": %d, "filenames": [%s], "shard_lengths": [%s]}}}\n' \
    $((n * 6)) "$files" "$lengths" > "$dst/_info.json"
rm -rf "$dst/stage"
