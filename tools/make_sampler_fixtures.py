#!/usr/bin/env python3
"""Write tests/data/loader/repeat_aug.txt: timm 1.0.31's RepeatAugSampler (train.py's --aug-repeats)
index lists, for tests/test_loader.c.

For each (dataset length, num_replicas, num_repeats, epoch) and each rank, the indices timm's sampler
yields after set_epoch(epoch): torch.randperm under a Generator seeded by the epoch, the repeats,
and the rank's strided, num_selected_samples-long share.

    PYTHONPATH=/opt/timm /usr/bin/python3 tools/make_sampler_fixtures.py
"""
import os

import timm
import torch
from timm.data.distributed_sampler import RepeatAugSampler

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'tests', 'data', 'loader', 'repeat_aug.txt')

# (len, num_replicas, num_repeats, epoch): small and >= 256 (selected_round) lists, more ranks than
# samples per rank, fractional repeats above and below 1
CASES = [(53, 4, 3, 2), (53, 2, 3, 0), (300, 4, 3, 5), (40, 3, 2.5, 1), (10, 8, 3, 7), (20, 2, 0.5, 3),
         (257, 3, 2, 11)]


def main():
    lines = ['# len replicas repeats epoch rank: indices (timm %s, torch %s)' % (timm.__version__, torch.__version__)]
    for n, world, repeats, epoch in CASES:
        for rank in range(world):
            s = RepeatAugSampler(list(range(n)), num_replicas=world, rank=rank, num_repeats=repeats)
            s.set_epoch(epoch)
            idx = list(s)
            assert len(idx) == len(s)
            lines.append('%d %d %r %d %d: %s' % (n, world, float(repeats), epoch, rank, ' '.join(map(str, idx))))
    with open(OUT, 'w') as f:
        f.write('\n'.join(lines) + '\n')


if __name__ == '__main__':
    main()
