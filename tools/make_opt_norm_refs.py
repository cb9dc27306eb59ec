#!/usr/bin/env python3
"""Regenerate tests/data/opt_norm_refs.safetensors: timm's optimizers whose update is not elementwise.

A small module (PARAMS: a conv weight large enough for Adafactor to factor, a small conv weight it
does not, a linear weight, its bias and a norm weight) with seeded parameters and gradients, the
gradients shaped so that SGDP/AdamP's projection is taken: conv.weight's gradient is orthogonal to
the weight per output channel (the channel view's branch), fc.weight's only over the whole tensor
(the layer view's). For each case below, timm.optim.create_optimizer_v2(model, name, lr=LR,
weight_decay=WD, **KWARGS) (timm's weight-decay groups: 1-D params and biases get none) takes ten
steps with the same gradients; with corrected_weight_decay its groups' lr is LR_NOW times LR (a
schedule's lr below the max), so that the corrected decay differs from the plain one. Written: init.<param>, grad.<param>, and <case>.step1.<param> and
<case>.step10.<param> for every param, for the Adafactors also <case>.state10.<param>.<key>, each
tensor of timm's optimizer state after the tenth step (as float32); the metadata lists the cases.
Muon's cases leave conv2.weight out (SKIP says why); they need a CPU with AVX-512 bfloat16 support
(avx512_bf16: oneDNN's bfloat16 matmul, whose rounding ctimm's Newton-Schulz follows).

Usage (Debian's torch belongs to /usr/bin/python3; see tools/make_vectors.py for the setup):
    PYTHONPATH=/opt/timm /usr/bin/python3 tools/make_opt_norm_refs.py [--out tests/data/opt_norm_refs.safetensors]
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# Muon's bfloat16 matmuls need oneDNN's AVX-512 kernels, which make_vectors' AVX2 pin would refuse
os.environ.setdefault("DNNL_MAX_CPU_ISA", "ALL")
import make_vectors  # noqa: E402,F401  (pins ATen's CPU kernels before torch is imported)
from make_vectors import save_safetensors  # noqa: E402

import torch  # noqa: E402
import timm  # noqa: E402
from timm.optim import create_optimizer_v2  # noqa: E402

PARAMS = [("conv.weight", (20, 18, 2, 2)), ("conv2.weight", (6, 4, 3, 3)), ("fc.weight", (24, 20)),
          ("fc.bias", (24,)), ("norm.weight", (18,))]
# case -> (timm name, lr, weight_decay, kwargs): each optimizer at its defaults, then one non-default setting
CASES = {
    "sgdp": ("sgdp", 0.1, 1e-4, {}),
    "sgdp_plain": ("sgdp", 0.1, 1e-4, {"nesterov": False, "wd_ratio": 0.5}),
    "adamp": ("adamp", 1e-3, 0.05, {}),
    "adamp_plain": ("adamp", 1e-3, 0.05, {"nesterov": False, "delta": 0.2}),
    "lambw": ("lambw", 5e-3, 0.02, {}),
    "lambcw": ("lambcw", 5e-3, 0.02, {}),
    "lambcd": ("lambcd", 5e-3, 0.02, {}),
    "adafactor": ("adafactor", 1e-2, 1e-2, {}),
    "adafactor_beta": ("adafactor", 1e-2, 1e-2, {"betas": (0.9, 0.999), "clip_threshold": 0.5}),
    "adafactorbv": ("adafactorbv", 1e-2, 1e-2, {}),
    "adafactorbv_f32": ("adafactorbv", 1e-2, 1e-2, {"momentum_dtype": "float32", "clipping_threshold": 1.0}),
    "adafactorbvc": ("adafactorbvc", 1e-2, 1e-2, {}),
    "adafactorbvc_unscaled": ("adafactorbvc", 1e-2, 1e-2, {"unscaled_wd": True}),
    "muon": ("muon", 2e-2, 1e-2, {}),
    "muon_polar": ("muon", 2e-2, 1e-2, {"ns_coefficients": "polar_express", "adjust_lr_fn": "original",
                                        "fallback_lr_scale": 0.5}),
}
# torch's CPU bfloat16 matmul of small matrices (m * n * k up to 16^3) accumulates in bfloat16, the
# larger ones (oneDNN, like CUDA's) in float32 and round once, which ctimm's Newton-Schulz does: Muon
# leaves out conv2.weight (a [6, 36] view) and its other weights' products are all above that size.
SKIP = {"muon": {"conv2.weight"}}
LR_NOW = 0.5


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        for name, shape in PARAMS:
            mod, attr = name.split(".")
            if not hasattr(self, mod):
                setattr(self, mod, torch.nn.Module())
            getattr(self, mod).register_parameter(attr, torch.nn.Parameter(torch.zeros(shape)))


def make_data():
    g = torch.Generator().manual_seed(27)
    init, grads = {}, {}
    for name, shape in PARAMS:
        p = torch.randn(shape, generator=g) * 0.5 + (1.0 if name == "norm.weight" else 0.0)
        r = torch.randn(shape, generator=g) * 0.1
        if name == "conv.weight":  # orthogonal to p per output channel
            pf, rf = p.reshape(shape[0], -1), r.reshape(shape[0], -1)
            r = (rf - (rf * pf).sum(1, keepdim=True) / (pf * pf).sum(1, keepdim=True) * pf).reshape(shape)
        elif name == "fc.weight":  # orthogonal to p as a whole
            r = r - (r * p).sum() / (p * p).sum() * p
        init[name], grads[name] = p, r
    return init, grads


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "opt_norm_refs.safetensors"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    init, grads = make_data()
    model = Net()
    params = dict(model.named_parameters())
    tensors = [(f"init.{n}", init[n]) for n, _ in PARAMS] + [(f"grad.{n}", grads[n]) for n, _ in PARAMS]
    for case, (name, lr, wd, kw) in CASES.items():
        skip = SKIP.get(name, set())
        with torch.no_grad():
            for n, p in params.items():
                p.copy_(init[n])
                p.grad = None if n in skip else grads[n].clone()
        opt = create_optimizer_v2(model, name, lr=lr, weight_decay=wd, **kw)
        if opt.defaults.get("corrected_weight_decay"):
            for group in opt.param_groups:
                group["lr"] = lr * LR_NOW
        for step in range(1, 11):
            opt.step()
            if step in (1, 10):
                tensors += [(f"{case}.step{step}.{n}", params[n].detach().clone()) for n, _ in PARAMS if n not in skip]
        if name.startswith("adafactor"):  # the factored states' names and shapes are the point
            for n, _ in PARAMS:
                tensors += [(f"{case}.state10.{n}.{k}", v.float()) for k, v in opt.state[params[n]].items()
                            if torch.is_tensor(v) and v.ndim > 0]
    meta = {"cases": json.dumps({c: {"opt": v[0], "lr": v[1], "weight_decay": v[2], "kwargs": v[3]}
                                 for c, v in CASES.items()}),
            "params": json.dumps(PARAMS), "torch_version": torch.__version__, "timm_version": timm.__version__,
            "generator": "tools/make_opt_norm_refs.py"}
    save_safetensors(args.out, tensors, meta)


if __name__ == "__main__":
    main()
