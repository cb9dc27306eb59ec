#!/usr/bin/env python3
"""Regenerate a model-reference file (shared/reference/models/<model>.json) with the real timm.

Records, for one timm model built on CPU in float32 with timm's default arguments:
param_count; the state_dict (every entry in order: name, shape, dtype, is_param); the default
cfg / pretrained_cfg / resolved data configs; no_weight_decay() and the exact parameter grouping
of timm's create_optimizer_v2; the model's plain attributes; which dropout / drop-path rates are
active; and `layers` / `containers`: every module with its class, hyper-parameters, parameter and
buffer shapes, and the input/output shapes of each call during one eval forward of a ones input
of batch 1 at the default input size (recorded with forward hooks).

Setup (once; Debian's torch belongs to /usr/bin/python3, not to the python3 first on PATH):
    apt-get update
    apt-get install -y python3-torch python3-torchvision python3-yaml
    pip install --no-deps --target /opt/timm timm

Usage:
    PYTHONPATH=/opt/timm /usr/bin/python3 tools/make_model_json.py --model resnet18 --out /tmp/resnet18.json
    (--compact: only the fields tests/test_models.c reads, for tests/data/models/ of the larger zoo)

The output is json.dumps(indent=1) plus a newline, keys in the order of the shipped files.
Nothing random is recorded (no weights, no outputs), so every field except timm_version /
torch_version (whatever is installed) and forward_check.seconds (wall time of the forward) is a
pure function of the timm model definition: with the same timm the files are reproduced exactly,
and a different timm only changes what its model code changed (e.g. a new module attribute).
"""

import argparse
import enum
import json
import os
import re
import sys
import time

import torch
import torch.nn as nn

import timm
from timm.data import resolve_data_config
from timm.optim import create_optimizer_v2

# Text copied verbatim from the shipped files (documents what the code below does).
OPT_CALL = "timm.optim.create_optimizer_v2(model, 'sgd', lr=0.1, weight_decay=1e-4)"
OPT_RULE = ("no decay if param.ndim <= 1 or name endswith .bias or name fnmatches "
            "model.no_weight_decay()")
FORWARD_MODE = "model.eval(), torch.no_grad()"
FORWARD_NOTE = ('shapes recorded with forward hooks; "in" is the first positional input; '
                'one record per call')
LAYERS_NOTE = ("layers = every leaf module plus every module owning parameters/buffers directly "
               "(e.g. BatchNormAct2d, ConvNeXtBlock.gamma, LayerScale); containers = all other "
               "modules. hparams = the module's plain attributes (+ derived bias/qkv_bias). "
               "in/out = shapes per forward call of the ones input.")

# The keys of `cfg` (taken from model.pretrained_cfg, in this order); the ones the pretrained
# cfg lacks are listed in `cfg_absent_keys` instead.
CFG_KEYS = ("input_size", "test_input_size", "mean", "std", "crop_pct", "test_crop_pct",
            "crop_mode", "interpolation", "num_classes", "first_conv", "classifier", "pool_size",
            "fixed_input_size")

# Root-module attributes that are configuration records, not model attributes (they have their
# own fields: pretrained_cfg; or are build bookkeeping).
ROOT_ATTRS_SKIP = {"pretrained_cfg", "default_cfg", "pretrained_model_args", "pretrained_cfg_overlay"}

# A short formula for activation modules whose class name alone does not say it exactly.
ACT_NOTES = {
    "GELU": "gelu (see approximate attr)",
    "GELUTanh": "gelu, tanh approximation (F.gelu approximate='tanh')",
    "SiLU": "x*sigmoid(x)",
    "Swish": "x*sigmoid(x)",
    "Hardswish": "x*relu6(x+3)/6",
    "HardSwish": "x*relu6(x+3)/6",
    "Hardsigmoid": "relu6(x+3)/6",
    "HardSigmoid": "relu6(x+3)/6",
    "Mish": "x*tanh(softplus(x))",
    "HardMish": "0.5*x*clamp(x+2, 0, 2)",
    "QuickGELU": "x*sigmoid(1.702*x)",
    "GELUApprox": "gelu, tanh approximation",
}


def _is_plain(v):
    """None / bool / int / float / str (enums by value) and lists, tuples and str-keyed dicts of them."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return True
    if isinstance(v, (list, tuple)):
        return all(_is_plain(x) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and _is_plain(x) for k, x in v.items())
    return False


def _plain(v):
    """JSON-ready copy of a plain value (tuples -> lists, enums -> their value)."""
    if isinstance(v, enum.Enum):
        return _plain(v.value)
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return float(v)
    if isinstance(v, str):
        return str(v)
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    raise TypeError(type(v))


def plain_attrs(mod, skip=()):
    """The module's own public attributes with plain values, in definition (__dict__) order.
    Submodules, parameters and buffers live in _modules/_parameters/_buffers, so they are not
    here; a submodule/parameter slot set to None is (e.g. BasicBlock.downsample = None)."""
    out = {}
    for k, v in vars(mod).items():
        if k.startswith("_") or k == "training" or k in skip:
            continue
        if _is_plain(v):
            out[k] = _plain(v)
    return out


def hparams_of(mod):
    hp = plain_attrs(mod)
    # derived: whether a registered bias slot holds a tensor (Conv/Linear/norms: bias=False
    # registers None)
    if "bias" in mod._parameters and "bias" not in hp:
        hp["bias"] = mod._parameters["bias"] is not None
    # derived for attention modules: qkv bias and the q/k/scale-norm classes
    children = mod._modules
    qkv = children.get("qkv")
    if qkv is not None:
        if "qkv_bias" not in hp and hasattr(qkv, "bias"):
            hp["qkv_bias"] = getattr(qkv, "bias") is not None
        for cname in ("q_norm", "k_norm", "norm"):
            key = cname + "_class"
            if cname in children and key not in hp:
                c = children[cname]
                hp[key] = None if c is None else type(c).__name__
    return hp


def shapes_of(x):
    """Shape of a tensor; list of shapes for a tuple/list of tensors; None otherwise."""
    if isinstance(x, torch.Tensor):
        return list(x.shape)
    if isinstance(x, (list, tuple)):
        return [shapes_of(y) for y in x]
    return None


def dtype_name(t):
    return str(t.dtype).replace("torch.", "")


def count_params(model):
    return sum(p.numel() for p in model.parameters())


def stochastic_info(model):
    """Dropout-like modules count once (their p / drop_prob); any other module counts each numeric
    attribute with 'drop' in its name (e.g. the model-level drop_rate). Nothing is changed."""
    checked, active = 0, []
    for mname, mod in model.named_modules():
        label = mname or "<model>"
        n = type(mod).__name__
        if isinstance(mod, nn.modules.dropout._DropoutNd) or n.startswith("DropPath") or n.startswith("DropBlock"):
            checked += 1
            for attr in ("p", "drop_prob"):
                v = getattr(mod, attr, None)
                if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
                    active.append(f"{label}.{attr}={v}")
            continue
        for attr, v in list(vars(mod).items()):
            if "drop" in attr.lower() and isinstance(v, (int, float)) and not isinstance(v, bool):
                checked += 1
                if v > 0:
                    active.append(f"{label}.{attr}={v}")
    return {"active": active, "all_nonzero_count": len(active), "checked": checked}


def optimizer_grouping(model):
    opt = create_optimizer_v2(model, "sgd", lr=0.1, weight_decay=1e-4)
    id2name = {id(p): n for n, p in model.named_parameters()}
    wd_names, no_wd_names, wd_numel, no_wd_numel = [], [], 0, 0
    for g in opt.param_groups:
        for p in g["params"]:
            if g["weight_decay"] == 0:
                no_wd_names.append(id2name[id(p)])
                no_wd_numel += p.numel()
            else:
                wd_names.append(id2name[id(p)])
                wd_numel += p.numel()
    return {
        "call": OPT_CALL,
        "rule": OPT_RULE,
        "group_weight_decays": [float(g["weight_decay"]) for g in opt.param_groups],
        "no_weight_decay_params": no_wd_names,
        "weight_decay_params_count": len(wd_names),
        "no_weight_decay_params_count": len(no_wd_names),
        "weight_decay_numel": wd_numel,
        "no_weight_decay_numel": no_wd_numel,
    }


def trace_layers(model, input_shape):
    """One eval/no_grad forward of torch.ones(input_shape) with a forward hook on every module
    (the root excluded). Returns (records by module name, output shape, seconds)."""
    calls = {}
    handles = []
    for name, mod in model.named_modules():
        if not name:
            continue
        calls[name] = []

        def hook(m, args, out, _name=name):
            calls[_name].append((shapes_of(args[0]) if args else None, shapes_of(out)))

        handles.append(mod.register_forward_hook(hook))
    model.eval()
    x = torch.ones(*input_shape)
    t0 = time.perf_counter()
    with torch.no_grad():
        y = model(x)
    seconds = time.perf_counter() - t0
    for h in handles:
        h.remove()
    return calls, shapes_of(y), seconds


def module_records(model, calls):
    layers, containers = [], []
    for name, mod in model.named_modules():
        if not name:
            continue
        rec = {"name": name, "cls": type(mod).__name__, "module": type(mod).__module__}
        note = ACT_NOTES.get(type(mod).__name__)
        if note is not None:
            rec["note"] = note
        hp = hparams_of(mod)
        if hp:
            rec["hparams"] = hp
        params = {k: list(v.shape) for k, v in mod._parameters.items() if v is not None}
        buffers = {k: list(v.shape) for k, v in mod._buffers.items() if v is not None}
        if params:
            rec["params"] = params
        if buffers:
            rec["buffers"] = buffers
        children = {k: type(v).__name__ for k, v in mod._modules.items() if v is not None}
        leaf = not children
        if children:
            rec["children"] = children
        rec["leaf"] = leaf
        c = calls.get(name, [])
        rec["calls"] = len(c)
        rec["in"] = [i for i, _ in c]
        rec["out"] = [o for _, o in c]
        (layers if (leaf or params or buffers) else containers).append(rec)
    return layers, containers


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="timm model name, e.g. resnet18")
    ap.add_argument("--out", required=True, help="output .json path")
    ap.add_argument("--compact", action="store_true",
                    help="only what tests/test_models.c reads (state_dict, param_count, cfgs, each layer's name, "
                         "class and output shapes), without indentation: the zoo's records stay small")
    ap.add_argument("--threads", type=int, default=None,
                    help="CPU threads for the forward (only forward_check.seconds depends on it)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.set_default_dtype(torch.float32)

    model = timm.create_model(args.model)   # pretrained=False, timm's default arguments
    model.eval()

    sd = model.state_dict()
    param_names = {n for n, _ in model.named_parameters()}
    state_dict = [{"name": k, "shape": list(v.shape), "dtype": dtype_name(v), "is_param": k in param_names}
                  for k, v in sd.items()]
    buffers_extra = [{"name": n, "shape": list(b.shape), "dtype": dtype_name(b)}
                     for n, b in model.named_buffers() if n not in sd]

    pcfg = dict(model.pretrained_cfg)
    cfg = {k: _plain(pcfg[k]) for k in CFG_KEYS if k in pcfg}
    cfg_absent = [k for k in CFG_KEYS if k not in pcfg]
    data_config = resolve_data_config({}, model=model)
    data_config_test = resolve_data_config({}, model=model, use_test_size=True)

    nwd_defined = hasattr(model, "no_weight_decay")
    nwd = sorted(model.no_weight_decay()) if nwd_defined else None

    grouping = optimizer_grouping(model)
    model_attrs = plain_attrs(model, skip=ROOT_ATTRS_SKIP)
    stochastic = stochastic_info(model)

    input_shape = [1] + list(data_config["input_size"])
    calls, out_shape, seconds = trace_layers(model, input_shape)
    layers, containers = module_records(model, calls)

    doc = {
        "model": args.model,
        "timm_version": timm.__version__,
        "torch_version": torch.__version__,
        "created_with": f"timm.create_model('{args.model}') (pretrained=False, fp32, cpu)",
        "model_class": type(model).__name__,
        "param_count": count_params(model),
        "num_state_dict_entries": len(state_dict),
        "state_dict": state_dict,
        "buffers_not_in_state_dict": buffers_extra,
        "cfg": cfg,
        "cfg_absent_keys": cfg_absent,
        "pretrained_cfg": _plain(pcfg),
        "data_config": _plain(data_config),
        "data_config_test": _plain(data_config_test),
        "no_weight_decay_defined": nwd_defined,
        "no_weight_decay": nwd,
        "optimizer_grouping": grouping,
        "model_attrs": model_attrs,
        "stochastic": stochastic,
        "forward_check": {
            "input": "torch.ones",
            "input_shape": input_shape,
            "mode": FORWARD_MODE,
            "output_shape": out_shape,
            "seconds": round(seconds, 3),
            "note": FORWARD_NOTE,
        },
        "layers_note": LAYERS_NOTE,
        "layers": layers,
        "containers": containers,
    }
    if args.compact:
        keep = ("model", "timm_version", "created_with", "model_class", "param_count", "state_dict", "cfg",
                "pretrained_cfg", "layers")
        doc = {k: doc[k] for k in keep}
        doc["layers"] = [{"name": l["name"], "cls": l["cls"], "out": l["out"]} for l in layers if "out" in l]
        text = json.dumps(doc, separators=(",", ":")) + "\n"
    else:
        text = json.dumps(doc, indent=1) + "\n"
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, args.out)
    print(f"wrote {args.out}: {len(text)} bytes, {doc['param_count']} params, "
          f"{len(state_dict)} state_dict entries, {len(layers)} layers, {len(containers)} containers, "
          f"forward {seconds:.3f}s")


if __name__ == "__main__":
    main()
