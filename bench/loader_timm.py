#!/usr/bin/python3
"""timm's own data loader over an image folder: the baseline for bench_loader.

The same two pipelines as bench/loader.c: train (RandomResizedCrop 224,
hflip 0.5, colour jitter 0.4, bilinear, drop_last) and eval (resize 256 +
centre crop 224), through timm.data.create_dataset + create_loader with
use_prefetcher=False, so the workers also convert to float and normalise
(ctimm leaves that to the device). num_workers and torch.set_num_threads
both equal the thread count. One untimed epoch, then --epochs timed ones;
the median gives images/s. cpu_s is the CPU time of the worker processes
over the timed epochs (from /proc), so a busy machine can be seen.

Run: PYTHONPATH=/opt/timm /usr/bin/python3 bench/loader_timm.py --folder DIR
Output lines: "timm <pipeline> threads=<t> images=<n> median_s=<s> img_per_s=<r> cpu_s_per_img=<c>".
"""
import argparse
import os
import statistics
import time

import torch
from timm.data import create_dataset, create_loader

CLK = os.sysconf('SC_CLK_TCK')


def children_cpu(pid):
    """CPU seconds (user + system) of the live child processes of pid."""
    total = 0.0
    for d in os.listdir('/proc'):
        if not d.isdigit():
            continue
        try:
            with open(f'/proc/{d}/stat') as f:
                fields = f.read().rsplit(')', 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:  # ppid
            total += (int(fields[11]) + int(fields[12])) / CLK
    return total


def run(folder, train, threads, batch, epochs, img):
    torch.set_num_threads(threads)
    ds = create_dataset('', root=folder, split='train' if train else 'validation', is_training=train)
    loader = create_loader(
        ds, input_size=(3, img, img), batch_size=batch, is_training=train, use_prefetcher=False,
        num_workers=threads, color_jitter=0.4, persistent_workers=True, pin_memory=False)
    times, cpu = [], 0.0
    images = 0
    for e in range(epochs + 1):
        c0 = children_cpu(os.getpid()) + time.process_time()
        t0 = time.perf_counter()
        n = 0
        for x, y in loader:
            n += x.shape[0]
        dt = time.perf_counter() - t0
        c1 = children_cpu(os.getpid()) + time.process_time()
        if e > 0:
            times.append(dt)
            cpu += c1 - c0
            images = n
    med = statistics.median(times)
    print(f'timm {"train" if train else "eval"} threads={threads} images={images} median_s={med:.4f} '
          f'min_s={min(times):.4f} max_s={max(times):.4f} img_per_s={images / med:.1f} '
          f'cpu_s_per_img={cpu / (images * epochs) * 1e3:.3f}ms', flush=True)
    del loader


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--folder', required=True)
    ap.add_argument('--threads', default='1,2')
    ap.add_argument('--batch', type=int, default=32)
    ap.add_argument('--epochs', type=int, default=3)
    ap.add_argument('--img', type=int, default=224)
    ap.add_argument('--pipeline', default='train,eval')
    args = ap.parse_args()
    for train in (True, False):
        if ('train' if train else 'eval') not in args.pipeline:
            continue
        for t in args.threads.split(','):
            run(args.folder, train, int(t), args.batch, args.epochs, args.img)


if __name__ == '__main__':
    main()
