# awk -f anchor_join.awk ANCHOR.csv OURS.csv: every model of OURS (a
# ctimm-bench results CSV) must have, in ANCHOR (a timm benchmark.py results
# CSV, or tests/data/timm_stats.csv), a row at the same image size with the
# same gmacs, macts and param_count. Column names are read from each header
# (timm's files order them differently; timm_stats.csv says img_size, gmacs,
# macts, and only its rows with attention 1, counted as ctimm-bench counts
# them, take part); '#' lines are comments.
BEGIN { FS = "," }
/^#/ { next }
{ sub(/\r$/, "") }
!seen[FILENAME]++ {
  for (i = 1; i <= NF; i++) {
    name = $i
    sub(/^infer_/, "", name)
    col[FILENAME, name] = i
  }
  next
}
function field(name) { return $col[FILENAME, name] }
FILENAME == ARGV[1] {
  if ((FILENAME, "attention") in col && field("attention") != 1) next
  key = field("model") "@" (field("img_size") + 0)
  if (!(key in anchor)) anchor[key] = (field("gmacs") + 0) "," (field("macts") + 0) "," (field("param_count") + 0)
  next
}
{
  key = field("model") "@" (field("img_size") + 0)
  ours = (field("gmacs") + 0) "," (field("macts") + 0) "," (field("param_count") + 0)
  n++
  if (!(key in anchor)) { print "no anchor row for " key; bad++ }
  else if (anchor[key] != ours) { print key ": ctimm " ours ", timm " anchor[key]; bad++ }
}
END { print n + 0 " models compared, " bad + 0 " differ"; exit bad > 0 || n == 0 }
