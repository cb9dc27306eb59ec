#!/usr/bin/env python3
"""Regenerate tests/data/opt_refs.safetensors: ten steps of each timm optimizer on test_resnet.

The parameters (state.*) and gradients (grad.*) of tests/data/test_resnet.safetensors go into
timm.create_model('test_resnet'); for each case below, timm.optim.create_optimizer_v2(model, name,
lr=LR, weight_decay=WD, **KWARGS) with everything else at timm's defaults (timm's weight-decay groups
too) takes ten steps, from the original parameters and a fresh optimizer, step k on the gradients
times SCALES[k - 1] (powers of two: exact in float32; changing gradients, as constant ones leave
Lion's, Adan's and LaProp's betas and ADOPT's clip without effect).
A case is an optimizer name, or name{key=value, ...} with keyword arguments as train.py's
--opt-kwargs passes them (momentum: create_optimizer_v2's own momentum, as --momentum). An optimizer
with corrected_weight_decay steps with its groups' lr at LR_NOW times the lr it was built with (a
schedule's lr below the max), so that lr**2 / max_lr differs from lr. A cautious optimizer's gradients
also flip sign at every third element (flattened index i with (i + step) % 3 == 0), so that its masks
are partial rather than all or nothing, as they are for gradients all along one direction. Written:
<case>.step1.<param> and <case>.step10.<param> for the fixed subset PARAMS (conv weights, which get
weight decay, BN weights and biases and fc.bias, which do not; all parameters would make a 40 MB
file), and grad_norm, the global gradient norm over ALL parameters (Lamb's clipping).

Usage (Debian's torch belongs to /usr/bin/python3; see tools/make_vectors.py for the setup):
    PYTHONPATH=/opt/timm /usr/bin/python3 tools/make_opt_refs.py [--out tests/data/opt_refs.safetensors]

Note: torch 1.13's NAdam (what timm's 'nadam' is there) takes mu_product * mu * mu_next for the
next-step product where torch >= 2.0 takes mu_product * mu_next; the metadata records the torch
version and tests/test_optim.c selects the matching rule.
"""

import argparse
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_vectors  # noqa: E402  (pins the CPU kernels before torch is imported)
from make_vectors import save_safetensors  # noqa: E402

import torch  # noqa: E402
import timm  # noqa: E402
from timm.optim import create_optimizer_v2  # noqa: E402

# case -> (lr, weight_decay, kwargs): train.py-like values that make every term visible
OPTIMIZERS = {
    "sgd": (0.1, 1e-4, {}), "momentum": (0.1, 1e-4, {}), "adamw": (1e-3, 0.05, {}), "adam": (1e-3, 1e-4, {}),
    "nadam": (2e-3, 1e-4, {}), "radam": (1e-3, 1e-4, {}), "lamb": (5e-3, 0.02, {}), "lambc": (5e-3, 0.02, {}),
    "lars": (0.1, 1e-4, {}), "larc": (0.1, 1e-4, {}), "nlars": (0.1, 1e-4, {}), "nlarc": (0.1, 1e-4, {}),
    "lars{nesterov=True}": (0.1, 1e-4, {"nesterov": True}), "rmsprop": (1e-3, 1e-5, {}),
    "rmsproptf": (1e-3, 1e-5, {}),
    "adabelief": (1e-3, 0.05, {}), "adagrad": (1e-2, 1e-4, {}),
    "sgdw": (0.1, 0.05, {}), "sgdw{nesterov=False}": (0.1, 0.05, {"nesterov": False}),
    "adamwlegacy": (1e-3, 0.05, {}), "nadamlegacy": (2e-3, 1e-4, {}),
    "nadamw": (1e-3, 0.05, {}), "nadamw{betas=(0.8, 0.99)}": (1e-3, 0.05, {"betas": (0.8, 0.99)}),
    "adamax": (2e-3, 1e-4, {}), "adamax{eps=0.001}": (2e-3, 1e-4, {"eps": 1e-3}),
    "adopt": (1e-3, 1e-4, {}), "adopt{clip_exp=None}": (1e-3, 1e-4, {"clip_exp": None}),
    "adoptw": (1e-3, 0.05, {}), "adoptw{betas=(0.8, 0.99), clip_exp=0.5}": (1e-3, 0.05, {"betas": (0.8, 0.99),
                                                                                       "clip_exp": 0.5}),
    "lion": (1e-4, 0.05, {}), "lion{betas=(0.95, 0.98)}": (1e-4, 0.05, {"betas": (0.95, 0.98)}),
    "madgrad": (1e-3, 1e-4, {}), "madgrad{momentum=0}": (1e-3, 1e-4, {"momentum": 0.0}),
    "madgradw": (1e-3, 0.05, {}), "madgrad{decoupled_decay=True, eps=0.0001}": (1e-3, 0.05, {"decoupled_decay": True,
                                                                                            "eps": 1e-4}),
    "adan": (1e-3, 0.02, {}), "adan{betas=(0.9, 0.95, 0.999)}": (1e-3, 0.02, {"betas": (0.9, 0.95, 0.999)}),
    "adanw": (1e-3, 0.02, {}),
    "laprop": (4e-4, 0.05, {}), "laprop{betas=(0.8, 0.99)}": (4e-4, 0.05, {"betas": (0.8, 0.99)}),
    "rmsproptf{decoupled_decay=True}": (1e-2, 0.05, {"decoupled_decay": True}),
    "adamc": (1e-3, 0.05, {}), "nadamc": (1e-3, 0.05, {}), "sgdc": (0.1, 0.05, {}), "adoptc": (1e-3, 0.05, {}),
    "lambcd": (5e-3, 0.02, {}), "lionc": (1e-4, 0.05, {}), "lapropc": (4e-4, 0.05, {}),
    "rmsproptfc": (1e-2, 0.05, {}),
    "lambw{corrected_weight_decay=True}": (5e-3, 0.02, {"corrected_weight_decay": True}),
    "adamwlegacy{corrected_weight_decay=True}": (1e-3, 0.05, {"corrected_weight_decay": True}),
    "cadamw": (1e-3, 0.05, {}), "cnadamw": (1e-3, 0.05, {}), "cadopt": (1e-3, 1e-4, {}), "cadoptw": (1e-3, 0.05, {}),
    "clion": (1e-4, 0.05, {}), "cadamc": (1e-3, 0.05, {}),
    "lion{betas=(0.95, 0.5), caution=True}": (1e-4, 0.05, {"betas": (0.95, 0.5), "caution": True}),
    "csgdw": (0.1, 0.05, {}), "csgdc": (0.1, 0.05, {}), "crmsproptf": (1e-2, 1e-5, {}),
    "sgdw{caution=True, nesterov=False}": (0.1, 0.05, {"caution": True, "nesterov": False}),
    "cadan": (1e-3, 0.02, {}), "cadanw": (1e-3, 0.02, {}), "claprop": (4e-4, 0.05, {}),
}
LR_NOW = 0.5
STEPS = (1, 10)
SCALES = (1, -0.5, 2, 0.25, -1, 1.5, 0.75, -2, 0.5, 1)
PARAMS = ["conv1.0.weight", "conv1.1.weight", "conv1.1.bias", "layer2.0.downsample.1.weight", "layer3.0.bn3.weight",
          "layer3.0.bn3.bias", "fc.bias"]
_DT = {"F32": torch.float32, "I64": torch.int64}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    out = {}
    for k, v in header.items():
        a, b = v["data_offsets"]
        out[k] = torch.frombuffer(bytearray(data[a:b]), dtype=_DT[v["dtype"]]).reshape(v["shape"]).clone()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--vectors", default=os.path.join(here, "..", "tests", "data", "test_resnet.safetensors"))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "opt_refs.safetensors"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    ref = read_safetensors(args.vectors)
    model = timm.create_model("test_resnet")
    model.load_state_dict({k[6:]: v for k, v in ref.items() if k.startswith("state.")})
    params = dict(model.named_parameters())
    start = {n: p.detach().clone() for n, p in params.items()}
    grads = {n: ref["grad." + n] for n in params}
    tensors = [("grad_norm", torch.linalg.vector_norm(torch.stack([g.norm() for g in grads.values()])))]
    for case, (lr, wd, kwargs) in OPTIMIZERS.items():
        with torch.no_grad():
            for n, p in params.items():
                p.copy_(start[n])
                p.grad = grads[n].clone()
        opt = create_optimizer_v2(model, case.split("{")[0], lr=lr, weight_decay=wd, **kwargs)
        if opt.defaults.get("corrected_weight_decay"):
            for group in opt.param_groups:
                group["lr"] = lr * LR_NOW
        for step in range(1, max(STEPS) + 1):
            with torch.no_grad():
                for n, p in params.items():
                    p.grad = grads[n] * SCALES[step - 1]
                    if opt.defaults.get("caution"):
                        flip = (torch.arange(p.numel()) + step) % 3 == 0
                        p.grad = torch.where(flip.reshape(p.shape), -p.grad, p.grad)
            opt.step()
            if step in STEPS:
                tensors += [(f"{case}.step{step}.{n}", params[n].detach().clone()) for n in PARAMS]
    meta = {"optimizers": json.dumps({k: {"lr": v[0], "weight_decay": v[1]} for k, v in OPTIMIZERS.items()}),
            "params": json.dumps(PARAMS), "steps": json.dumps(STEPS), "scales": json.dumps(SCALES),
            "lr_now": json.dumps(LR_NOW), "torch_version": torch.__version__,
            "timm_version": timm.__version__, "generator": "tools/make_opt_refs.py"}
    save_safetensors(args.out, tensors, meta)


if __name__ == "__main__":
    main()
