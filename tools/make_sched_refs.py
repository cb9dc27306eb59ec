#!/usr/bin/env python3
"""Reference learning rates from timm's own schedulers for tests/test_sched.c.

For each case, create_scheduler_v2 (through scheduler_kwargs, as train.py
does) on a dummy SGD optimizer with lr 0.1, then train.py's calls replayed:
the LR of every epoch (or every update with sched_on_updates), the
scheduler's epoch count, and the LR after a resume at epoch 2 on a fresh
scheduler. Plateau gets a fixed synthetic metric sequence.

    PYTHONPATH=/opt/timm python3 tools/make_sched_refs.py > tests/data/sched_refs.json
"""
import json
import types

import torch
from timm.scheduler import create_scheduler_v2, scheduler_kwargs

BASE_LR = 0.1
RESUME_EPOCH = 2

# train.py's defaults for the scheduler flags
DEFAULTS = dict(sched='cosine', epochs=12, decay_epochs=90, decay_milestones=[90, 180, 270], warmup_epochs=5,
                cooldown_epochs=0, patience_epochs=10, decay_rate=0.1, min_lr=0., warmup_lr=1e-5,
                warmup_prefix=False, lr_noise=None, lr_noise_pct=0.67, lr_noise_std=1., seed=42,
                lr_cycle_mul=1., lr_cycle_decay=0.5, lr_cycle_limit=1, lr_k_decay=1.0, eval_metric='top1',
                sched_on_updates=False)

# metrics seen by plateau: rising, then flat (bad epochs), a small gain below
# the threshold, then rising again
METRIC = [10, 20, 30, 30, 30, 30.001, 29, 31, 31, 31, 31, 31, 40, 40, 40, 40, 40, 40, 40, 40]
LOSS = [5 - 0.1 * m / 10 for m in METRIC]

CASES = [
    ('cosine_default', dict()),
    ('cosine_no_warmup', dict(warmup_epochs=0, min_lr=1e-4)),
    ('cosine_warmup_prefix_cooldown', dict(warmup_prefix=True, cooldown_epochs=3, min_lr=1e-3)),
    ('cosine_k_decay', dict(warmup_epochs=2, lr_k_decay=1.7, min_lr=1e-5)),
    ('cosine_cycles', dict(warmup_epochs=1, epochs=5, lr_cycle_limit=3, lr_cycle_decay=0.5)),
    ('cosine_cycle_mul', dict(warmup_epochs=0, epochs=4, lr_cycle_mul=1.5, lr_cycle_limit=3, lr_cycle_decay=0.7)),
    ('cosine_cycle_mul_prefix', dict(warmup_epochs=2, warmup_prefix=True, epochs=3, lr_cycle_mul=2.0,
                                     lr_cycle_limit=3, cooldown_epochs=2)),
    ('cosine_noise_from', dict(lr_noise=[0.4], seed=7)),
    ('cosine_noise_range', dict(warmup_epochs=0, lr_noise=[0.25, 0.75], lr_noise_pct=0.3)),
    ('cosine_updates', dict(epochs=4, warmup_epochs=1, sched_on_updates=True, min_lr=1e-4)),
    ('cosine_updates_noise_cycles', dict(epochs=2, warmup_epochs=1, warmup_prefix=True, sched_on_updates=True,
                                         lr_cycle_limit=2, lr_noise=[0.5], cooldown_epochs=1)),
    ('tanh_default', dict(epochs=10)),
    ('tanh_prefix_cycles', dict(epochs=4, warmup_epochs=2, warmup_prefix=True, lr_cycle_limit=2,
                                lr_cycle_mul=1.5, min_lr=1e-4, cooldown_epochs=1)),
    ('tanh_updates', dict(epochs=3, warmup_epochs=1, sched_on_updates=True)),
    ('step_basic', dict(sched='step', epochs=10, decay_epochs=3, decay_rate=0.5, warmup_epochs=0)),
    ('step_warmup_float_decay', dict(sched='step', epochs=12, decay_epochs=2.4, warmup_epochs=2)),
    ('step_prefix_noise', dict(sched='step', epochs=10, decay_epochs=2, warmup_epochs=2, warmup_prefix=True,
                               lr_noise=[0.2, 0.9], lr_noise_pct=0.5, seed=3, cooldown_epochs=4)),
    ('step_updates', dict(sched='step', epochs=4, decay_epochs=1, decay_rate=0.5, warmup_epochs=1,
                          sched_on_updates=True)),
    ('multistep_basic', dict(sched='multistep', epochs=10, decay_milestones=[2, 5, 8], warmup_epochs=0)),
    ('multistep_warmup', dict(sched='multistep', epochs=10, decay_milestones=[3, 6], warmup_epochs=2,
                              decay_rate=0.3)),
    ('multistep_updates_prefix', dict(sched='multistep', epochs=4, decay_milestones=[1, 3], warmup_epochs=1,
                                      warmup_prefix=True, sched_on_updates=True)),
    ('plateau_max', dict(sched='plateau', epochs=20, patience_epochs=2, warmup_epochs=0)),
    ('plateau_warmup_min', dict(sched='plateau', epochs=20, patience_epochs=1, warmup_epochs=3, eval_metric='loss',
                                decay_rate=0.5, min_lr=0.02)),
    ('plateau_noise', dict(sched='plateau', epochs=20, patience_epochs=2, warmup_epochs=1, lr_noise=[0.3, 0.8])),
    ('poly_default', dict(sched='poly', epochs=10, decay_rate=2.0)),
    ('poly_k_decay_cycles', dict(sched='poly', epochs=4, decay_rate=0.5, lr_k_decay=0.5, lr_cycle_limit=2,
                                 warmup_epochs=1, min_lr=1e-3)),
    ('poly_updates', dict(sched='poly', epochs=3, decay_rate=1.5, warmup_epochs=1, sched_on_updates=True,
                          cooldown_epochs=1)),
]
UPDATES_PER_EPOCH = 3


def lr_of(opt):
    return opt.param_groups[0]['lr']


def make(cfg):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=BASE_LR)
    sched, num_epochs = create_scheduler_v2(opt, **scheduler_kwargs(cfg, decreasing_metric='loss' in cfg.eval_metric),
                                            updates_per_epoch=UPDATES_PER_EPOCH)
    return opt, sched, num_epochs


def run(name, over):
    cfg = types.SimpleNamespace(**{**DEFAULTS, **over})
    metric = LOSS if cfg.eval_metric == 'loss' else METRIC
    opt, sched, num_epochs = make(cfg)
    lrs = []
    num_updates = 0
    for epoch in range(num_epochs):  # train.py's loop
        if cfg.sched_on_updates:
            for _ in range(UPDATES_PER_EPOCH):
                lrs.append(lr_of(opt))
                num_updates += 1
                sched.step_update(num_updates=num_updates)
        else:
            lrs.append(lr_of(opt))
        sched.step(epoch + 1, metric[epoch % len(metric)])
    opt, sched2, _ = make(cfg)
    if cfg.sched_on_updates:
        sched2.step_update(RESUME_EPOCH * UPDATES_PER_EPOCH)
    else:
        sched2.step(RESUME_EPOCH)
    args = {k: v for k, v in vars(cfg).items()}
    return dict(name=name, args=args, base_lr=BASE_LR, updates_per_epoch=UPDATES_PER_EPOCH, metrics=metric,
                num_epochs=num_epochs, lrs=lrs, resume_epoch=RESUME_EPOCH, resume_lr=lr_of(opt))


def main():
    out = [run(n, o) for n, o in CASES]
    print(json.dumps(out, indent=None, separators=(',', ':')).replace('},{', '},\n{'))


if __name__ == '__main__':
    main()
