"""timm's own benchmark.py over bench/gpu_set.csv in one process, for bench/gpu_check.sh.

benchmark.py takes one batch size for a whole --model-list (and sleeps 10 s
between models); the GPU check needs each model at its own batch size from
timm's published CSVs, so this imports benchmark.py and calls its
benchmark(args) once per (model, bench) with benchmark.py's own parser, and
appends one row per run to --out as soon as it is measured (a run cut short
by the time budget keeps what it finished):

    model,bench,samples_per_sec,step_time_ms,batch_size,img_size,error,peak_alloc_mib

peak_alloc_mib is torch.cuda.max_memory_allocated over the run (its peak
reset before it), which issue 28 compares ctimm's device memory with.

--deadline (seconds since the epoch) skips the runs that would start with
less than --est seconds left, each recorded with error=skipped: budget.
"""
import argparse
import csv
import importlib.util
import os
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--benchmark-py", required=True, help="timm's benchmark.py")
ap.add_argument("--set", required=True, help="bench/gpu_set.csv")
ap.add_argument("--out", required=True)
ap.add_argument("--models", default="", help="comma-separated subset, in this order (default: the whole set)")
ap.add_argument("--benches", default="train,inference")
ap.add_argument("--torchcompile", action="store_true")
ap.add_argument("--warm", type=int, default=5)
ap.add_argument("--iters", type=int, default=15, help="at least 5 (benchmark.py logs every iters // 5)")
ap.add_argument("--device", default="cuda")
ap.add_argument("--amp-dtype", default="float16")
ap.add_argument("--deadline", type=float, default=0.0)
ap.add_argument("--est", type=float, default=15.0, help="seconds one run needs at least")
ap.add_argument("--dry-run", action="store_true", help="check the arguments and the set, import nothing, run nothing")
opt = ap.parse_args()
if opt.iters < 5:
    sys.exit("timm_gpu_bench: --iters must be at least 5 (benchmark.py divides by iters // 5)")

jobs = {}
order = []
with open(opt.set) as f:
    for line in f:
        if line.startswith("#") or not line.strip():
            continue
        model, img, train_bs, infer_bs = line.strip().split(",")
        jobs[model] = (int(img), int(train_bs), int(infer_bs))
        order.append(model)
if opt.models:
    order = [m for m in opt.models.split(",") if m]
    unknown = [m for m in order if m not in jobs]
    if unknown:
        sys.exit(f"timm_gpu_bench: not in {opt.set}: {', '.join(unknown)}")

if opt.dry_run:
    found = "found" if os.path.exists(opt.benchmark_py) else "not found (tools/prepare_gpu_check.sh carries it)"
    print(f"timm_gpu_bench: dry run: {len(order)} models, --iters {opt.iters}; {opt.benchmark_py} {found}")
    sys.exit(0)
spec = importlib.util.spec_from_file_location("timm_benchmark", opt.benchmark_py)
bm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bm)
import torch  # noqa: E402  (after benchmark.py, which sets TF32 and cudnn.benchmark)

new = not os.path.exists(opt.out)
out = open(opt.out, "a", newline="")
w = csv.writer(out, lineterminator="\n")
if new:
    w.writerow(["model", "bench", "samples_per_sec", "step_time_ms", "batch_size", "img_size", "error",
                "peak_alloc_mib"])
    out.flush()

# each bench's rows in turn, training's first where it is asked first: issue
# 22's targets are training's, and the deadline skips what comes last
for bench in opt.benches.split(","):
    for model in order:
        img, train_bs, infer_bs = jobs[model]
        bs = train_bs if bench == "train" else infer_bs
        if opt.deadline and time.time() + opt.est > opt.deadline:
            w.writerow([model, bench, "", "", bs, img, "skipped: budget"])
            out.flush()
            continue
        argv = ["--model", model, "--bench", bench, "-b", str(bs), "--img-size", str(img), "--amp",
                "--amp-dtype", opt.amp_dtype, "--channels-last", "--device", opt.device, "--num-warm-iter", str(opt.warm), "--num-bench-iter", str(opt.iters)]
        if opt.torchcompile:
            argv.append("--torchcompile")
        t0 = time.time()
        if opt.device == "cuda":  # issue 28 compares ctimm's device memory with this peak
            torch.cuda.reset_peak_memory_stats()
        try:
            r = bm.benchmark(bm.parser.parse_args(argv))
        except Exception as e:  # one model's failure must not end the whole check
            r = {"error": f"{type(e).__name__}: {e}"}
        pre = "train_" if bench == "train" else "infer_"
        # one plain CSV field: gpu_table.awk splits on commas
        err = str(r.get("error", "")).replace("\n", " ").replace(",", ";").replace('"', "'")[:200]
        peak = f"{torch.cuda.max_memory_allocated() / 2**20:.1f}" if opt.device == "cuda" and not err else ""
        w.writerow([model, bench, r.get(pre + "samples_per_sec", ""), r.get(pre + "step_time", ""),
                    r.get(pre + "batch_size", bs), img, err, peak])
        out.flush()
        print(f"timm_gpu_bench: {model} {bench} {'compiled' if opt.torchcompile else 'eager'}: "
              f"{r.get(pre + 'samples_per_sec', err)} ({time.time() - t0:.0f} s)", flush=True)
        if opt.torchcompile:
            torch._dynamo.reset()
        if opt.device == "cuda":
            torch.cuda.empty_cache()
out.close()
