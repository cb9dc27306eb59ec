#!/usr/bin/env python3
"""Rows of tests/data/timm_stats.csv for models: timm's published profile numbers and the exact fvcore counts.

For each (model, img_size, gmacs, macts, param_count) of the named models in the benchmark-infer CSVs that
have those columns (/work/shared/anchors/timm-results), one row with the tags it appears under, and the exact
fvcore 0.1.5 FlopCountAnalysis / ActivationCountAnalysis totals of timm's model (eval, torch.ones(1,3,S,S))
and its parameter count. attention is 0 for rows found only in the pt210 files (fused attention, see the CSV's
header: fvcore's matmul entries left out), else 1; for models without attention both conventions agree.

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


def counts(model, size, attention):
    kwargs = {"img_size": size} if timm.models.get_pretrained_cfg(model).to_dict().get("fixed_input_size") else {}
    m = timm.create_model(model, **kwargs).eval()
    x = torch.ones(1, 3, size, size)
    with torch.no_grad():
        fl, ac = FlopCountAnalysis(m, x), ActivationCountAnalysis(m, x)
        for a in (fl, ac):
            a.unsupported_ops_warnings(False)
            a.uncalled_modules_warnings(False)
        macs, acts = int(fl.total()), int(ac.total())
        if not attention:  # fused attention: fvcore would not see the q@k^T and attn@v matmuls
            macs -= int(fl.by_operator().get("matmul", 0))
            acts -= int(ac.by_operator().get("matmul", 0))
        return macs, acts, sum(p.numel() for p in m.parameters())


def main():
    torch.set_num_threads(2)
    for (model, size, gmacs, macts, params), tags in published(set(sys.argv[1:])).items():
        # the pt210 files' ViT rows count fused attention (see the CSV's header); elsewhere both agree
        attention = 0 if all("pt210" in t for t in tags) else 1
        macs, acts, n = counts(model, size, attention)
        print(f"{model},{size},{gmacs},{macts},{params},{attention},{macs},{acts},{n},{' '.join(tags)}", flush=True)


if __name__ == "__main__":
    main()
