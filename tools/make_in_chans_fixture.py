#!/usr/bin/env python3
"""Write tests/data/models_in_chans1.json: what timm's create_model(name, in_chans=1) changes in
each recorded model's state_dict (tests/data/models/<name>.json holds the in_chans=3 one), for
tests/test_models.c to build the same model with ModelArgs.in_chans = 1 and compare.

    PYTHONPATH=/opt/timm /usr/bin/python3 tools/make_in_chans_fixture.py

Per model (every tests/data/models/*.json): param_count and num_state_dict_entries at in_chans=1,
the pretrained cfg's first_conv, and `changed`: the entries whose shape differs from in_chans=3
(name -> shape), in state_dict order. Nothing random is recorded; the file is a pure function of
timm's model definitions.
"""

import glob
import json
import os
import sys

import torch
import timm

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "data", "models_in_chans1.json")
IN_CHANS = 1


def shapes(model):
    return {k: list(v.shape) for k, v in model.state_dict().items()}


def main():
    torch.set_grad_enabled(False)
    names = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(ROOT, "tests", "data", "models", "*.json")))
    models = {}
    for name in names:
        rgb = shapes(timm.create_model(name))
        m = timm.create_model(name, in_chans=IN_CHANS)
        gray = shapes(m)
        assert list(gray) == list(rgb), f"{name}: in_chans={IN_CHANS} renames state_dict entries"
        models[name] = {
            "param_count": sum(p.numel() for p in m.parameters()),
            "num_state_dict_entries": len(gray),
            "first_conv": m.pretrained_cfg["first_conv"],
            "changed": {k: s for k, s in gray.items() if s != rgb[k]},
        }
        print(f"{name}: {models[name]['changed']}")
    head = {"timm_version": timm.__version__, "torch_version": torch.__version__,
            "created_with": f"timm.create_model(name, in_chans={IN_CHANS}) against timm.create_model(name)",
            "in_chans": IN_CHANS}
    # one line a model, so a timm update's changes read as a diff of lines
    lines = [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
    lines += [" \"models\": {"] + [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in models.items()]
    lines[-1] = lines[-1][:-1]
    with open(OUT, "w") as f:
        f.write("{\n" + "\n".join(lines) + "\n }\n}\n")


if __name__ == "__main__":
    sys.exit(main())
