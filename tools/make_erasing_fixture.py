#!/usr/bin/env python3
"""Write tests/data/erasing_timm.txt: how timm's RandomErasing erases, over many draws.

timm's draws come from Python's random module, which ctimm does not reproduce, so its random
erasing (runtime/data/random_erasing.c) is checked against the distribution instead: for each case
(probability, min_count, max_count) timm.data.RandomErasing in 'const' mode erases DRAWS images of
ones of 3 x H x W, and the file records the fraction of images erased and the mean and standard
deviation of the erased fraction of an erased image (boxes may overlap). tests/test_transforms.c
draws as many with ctimm and compares.

    PYTHONPATH=/opt/timm /usr/bin/python3 tools/make_erasing_fixture.py > tests/data/erasing_timm.txt
"""
import random

import torch
from timm.data.random_erasing import RandomErasing

H, W, DRAWS = 24, 20, 20000
CASES = [(0.25, 1, 1), (1.0, 1, 1), (1.0, 1, 3), (0.6, 2, 4)]


def main():
    random.seed(0)
    print(f"# timm RandomErasing, 'const' mode, {DRAWS} images of 3x{H}x{W}: "
          "prob min_count max_count erased_share mean_fraction std_fraction")
    for prob, lo, hi in CASES:
        re = RandomErasing(probability=prob, mode='const', min_count=lo, max_count=hi, device='cpu')
        fracs = []
        for _ in range(DRAWS):
            img = re(torch.ones(3, H, W))
            erased = (img == 0).all(0).sum().item()
            if erased:
                fracs.append(erased / (H * W))
        f = torch.tensor(fracs, dtype=torch.float64)
        print(f"{prob} {lo} {hi} {len(fracs) / DRAWS:.6f} {f.mean().item():.6f} {f.std().item():.6f}")


if __name__ == '__main__':
    main()
