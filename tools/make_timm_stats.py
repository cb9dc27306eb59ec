#!/usr/bin/env python3
"""Rows of tests/data/timm_stats.csv for models: timm's published profile numbers and the exact fvcore counts.

For each (model, img_size, gmacs, macts, param_count) of the named models in the benchmark-infer CSVs that
have those columns (/work/shared/anchors/timm-results), one row with the tags it appears under, and the exact
fvcore 0.1.5 FlopCountAnalysis / ActivationCountAnalysis totals of timm's model (eval, torch.ones(1,3,S,S))
and its parameter count. attention is 1: for models without attention both conventions agree (the ViT rows
of the pt210 files need 0, see the CSV's header).

    pip install --no-deps --target /opt/fvcore fvcore iopath yacs tabulate termcolor portalocker tqdm
    PYTHONPATH=/opt/timm:/opt/fvcore /usr/bin/python3 tools/make_timm_stats.py MODEL ... >> tests/data/timm_stats.csv
"""

import collections
import csv
import glob
import os
import sys

import torch

import timm
from fvcore.nn import ActivationCountAnalysis, FlopCountAnalysis

ANCHORS = "/work/shared/anchors/timm-results"


def published(models):
    rows = collections.OrderedDict()
    for path in sorted(glob.glob(os.path.join(ANCHORS, "benchmark-infer-*.csv"))):
        tag = os.path.basename(path)[len("benchmark-infer-"):-len(".csv")]
        reader = csv.DictReader(open(path))
        if "infer_gmacs" not in reader.fieldnames:
            continue
        for r in reader:
            if r["model"] in models and r.get("infer_gmacs"):
                key = (r["model"], int(r["infer_img_size"]), r["infer_gmacs"], r["infer_macts"], r["param_count"])
                rows.setdefault(key, []).append(tag)
    return rows


def counts(model, size):
    m = timm.create_model(model).eval()
    x = torch.ones(1, 3, size, size)
    with torch.no_grad():
        fl, ac = FlopCountAnalysis(m, x), ActivationCountAnalysis(m, x)
        for a in (fl, ac):
            a.unsupported_ops_warnings(False)
            a.uncalled_modules_warnings(False)
        return int(fl.total()), int(ac.total()), sum(p.numel() for p in m.parameters())


def main():
    torch.set_num_threads(2)
    for (model, size, gmacs, macts, params), tags in published(set(sys.argv[1:])).items():
        macs, acts, n = counts(model, size)
        print(f"{model},{size},{gmacs},{macts},{params},1,{macs},{acts},{n},{' '.join(tags)}", flush=True)


if __name__ == "__main__":
    main()
