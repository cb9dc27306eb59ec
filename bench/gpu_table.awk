# awk -f gpu_table.awk EAGER.csv COMPILED.csv CTIMM.csv: the GPU check's
# side-by-side table. Each input has the columns (by header name)
# model,bench,samples_per_sec,...,batch_size,...,error; a missing or empty
# file (it must exist) is a side that did not run. One row per (model, bench) in the order
# first seen: the three samples/s (or the start of the error), ctimm against
# torch.compile and against eager, and for the target models' train rows
# whether ctimm met issue 10's target (>= torch.compile and >= 1.3x eager);
# then, where a side has the column peak_alloc_mib (timm: torch.cuda's
# max_memory_allocated; ctimm: the device memory its program allocated),
# the peaks against eager's and issue 28's target (<= 0.8x on train rows);
# then each side's distinct errors with their counts.
BEGIN {
    FS = ","
    split("timm_eager timm_compile ctimm", side, " ")
    split("resnet50 vit_base_patch16_224 vit_base_patch32_384 efficientnet_b0 convnext_tiny", t, " ")
    for (i in t) target[t[i]] = 1
}
{ sub(/\r$/, "") }
FNR == 1 {
    for (a = 1; a < ARGC; a++) if (ARGV[a] == FILENAME) fi = a
    for (i = 1; i <= NF; i++) col[fi, $i] = i
    next
}
{
    key = $col[fi, "model"] SUBSEP $col[fi, "bench"]
    if (!(key in seen)) { seen[key] = 1; order[++n] = key }
    sps = $col[fi, "samples_per_sec"]
    err = (fi, "error") in col ? $col[fi, "error"] : ""
    val[fi, key] = sps != "" ? sps : (err ~ /^skipped/ ? "skipped" : err != "" ? "error" : "-")
    if (sps == "" && err != "" && !((fi, err) in nerr)) { errs[fi, ++ne[fi]] = err }
    if (sps == "" && err != "") nerr[fi, err]++
    num[fi, key] = sps != "" ? sps + 0 : 0
    if ((fi, "batch_size") in col && $col[fi, "batch_size"] != "") bs[key] = $col[fi, "batch_size"]
    if ((fi, "peak_alloc_mib") in col && $col[fi, "peak_alloc_mib"] != "") { mem[fi, key] = $col[fi, "peak_alloc_mib"]; anymem = 1 }
}
function ratio(a, b) { return (a > 0 && b > 0) ? sprintf("%.2fx", a / b) : "-" }
END {
    printf "%-24s %-9s %5s %18s %18s %18s %8s %8s %s\n", "model", "bench", "bs", "timm eager/s",
        "timm compile/s", "ctimm/s", "c/comp", "c/eager", "target"
    for (r = 1; r <= n; r++) {
        key = order[r]
        split(key, mk, SUBSEP)
        e = num[1, key]; c = num[2, key]; x = num[3, key]
        goal = ""
        if (mk[1] in target && mk[2] == "train")
            goal = (x > 0 && c > 0 && e > 0) ? ((x >= c && x >= 1.3 * e) ? "met" : "MISSED") : "unmeasured"
        printf "%-24s %-9s %5s %18s %18s %18s %8s %8s %s\n", mk[1], mk[2], bs[key],
            (1, key) in val ? val[1, key] : "-", (2, key) in val ? val[2, key] : "-",
            (3, key) in val ? val[3, key] : "-", ratio(x, c), ratio(x, e), goal
    }
    if (anymem) {
        printf "peak device memory, MiB:\n%-24s %-9s %12s %12s %12s %8s %s\n", "model", "bench", "timm eager",
            "timm compile", "ctimm", "c/eager", "target"
        for (r = 1; r <= n; r++) {
            key = order[r]
            split(key, mk, SUBSEP)
            e = (1, key) in mem ? mem[1, key] : "-"; c = (2, key) in mem ? mem[2, key] : "-"
            x = (3, key) in mem ? mem[3, key] : "-"
            goal = mk[2] != "train" ? "" : (e != "-" && x != "-") ? (x + 0 <= 0.8 * e ? "met" : "MISSED") : "unmeasured"
            printf "%-24s %-9s %12s %12s %12s %8s %s\n", mk[1], mk[2], e, c, x, ratio(x + 0, e + 0), goal
        }
    }
    for (f = 1; f <= 3; f++)
        for (k = 1; k <= ne[f]; k++)
            printf "%s, %d run(s): %s\n", side[f], nerr[f, errs[f, k]], errs[f, k]
}
