#!/bin/sh
# make_real_labels.sh SRC DST MODE: DST/<class>/ILSVRC2012_val_<n>.JPEG, 5 images a class
# from SRC, and DST.json with each image's ReaL list: MODE own = [its class],
# all = every class, mixed = [] for every third image, else [its class].
src=$1 dst=$2 mode=$3
rm -rf "$dst" && i=0 k=0 && printf '[' > "$dst.json"
for c in $(ls "$src"); do
  mkdir -p "$dst/$c"
  for f in $(ls "$src/$c" | head -5); do
    i=$((i + 1))
    cp "$src/$c/$f" "$dst/$c/$(printf 'ILSVRC2012_val_%08d.JPEG' $i)"
    case $mode in
      all) l='0, 1, 2, 3, 4, 5, 6, 7, 8, 9' ;;
      mixed) if [ $((i % 3)) -eq 0 ]; then l=''; else l=$k; fi ;;
      *) l=$k ;;
    esac
    [ $i -gt 1 ] && printf ', ' >> "$dst.json"
    printf '[%s]' "$l" >> "$dst.json"
  done
  k=$((k + 1))
done
printf ']\n' >> "$dst.json"
