"""timm's own benchmark.py, `--bench train`, run unchanged, plus what
bench/run_train_cpu.sh needs beside its result: the thread count torch
really uses, which BLAS library the process loaded, the process's CPU
time over the timed steps, and (--gemm N) torch's N x N x N f32 matmul rate.

usage: train_timm.py BENCHMARK_PY --threads T [--gemm N] -- BENCHMARK_ARGS...

benchmark.py is loaded as a module and its own benchmark(args) is called,
exactly as its main() does for one model; the one hook is its module-level
timestamp(), wrapped to also read the process CPU time, so the timed loop's
CPU time is the difference between the call that starts it (the one after
the 2 x --num-warm-iter calls of the warm-up steps) and the last call.
Prints one line: "timm train model=<m> batch=<b> img=<n> ... samples_per_s=<r>
ms_per_step=<t> cpu_ms_per_step=<c>".
"""
import argparse
import importlib.util
import sys
import time

import torch


def blas_libs():
    libs = set()
    with open('/proc/self/maps') as f:
        for line in f:
            path = line.split()[-1]
            if any(k in path for k in ('blas', 'lapack', 'dnnl', 'mkl', 'gomp')):
                libs.add(path)
    return sorted(libs)


def gemm_rate(n):
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    ts = []
    for _ in range(5):
        t0 = time.perf_counter()
        torch.mm(a, b)
        ts.append(time.perf_counter() - t0)
    t = sorted(ts)[2]
    print(f'timm gemm n={n} threads={torch.get_num_threads()} ms={t * 1e3:.3f} '
          f'gflop_per_s={2 * n ** 3 / t * 1e-9:.1f}', flush=True)


def main():
    argv = sys.argv[1:]
    split = argv.index('--') if '--' in argv else len(argv)
    p = argparse.ArgumentParser()
    p.add_argument('benchmark_py')
    p.add_argument('--threads', type=int, required=True)
    p.add_argument('--gemm', type=int, default=0)
    own = p.parse_args(argv[:split])
    torch.set_num_threads(own.threads)

    spec = importlib.util.spec_from_file_location('timm_benchmark', own.benchmark_py)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    calls = []

    def timestamp(sync=False):
        calls.append(time.process_time())
        return time.perf_counter()

    bench.timestamp = timestamp
    args = bench.parser.parse_args(argv[split + 1:])
    if args.device != 'cpu' or args.bench != 'train':
        sys.exit('train_timm.py: for --device cpu --bench train only')
    bench.setup_default_logging()
    if own.gemm:
        gemm_rate(own.gemm)
    r = bench.benchmark(args)
    print(f'# torch {torch.__version__}, threads {torch.get_num_threads()}, '
          f'libraries: {" ".join(blas_libs())}', file=sys.stderr, flush=True)
    if 'error' in r:
        sys.exit(f'train_timm.py: {args.model}: {r["error"]}')
    start = 2 * args.num_warm_iter
    cpu = (calls[-1] - calls[start]) / args.num_bench_iter
    print(f'timm train model={args.model} batch={r["train_batch_size"]} img={r["train_img_size"]} '
          f'threads={torch.get_num_threads()} steps={args.num_bench_iter} '
          f'samples_per_s={r["train_samples_per_sec"]:.2f} ms_per_step={r["train_step_time"]:.3f} '
          f'cpu_ms_per_step={cpu * 1e3:.3f}', flush=True)


if __name__ == '__main__':
    main()
