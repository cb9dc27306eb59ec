#!/usr/bin/env python3
"""Write the zoo's numeric references (tests/data/zoo_refs/<family>.json) with the real timm.

A full-size model's weights (tens of millions of numbers) do not fit the repository, so both sides fill
them by one formula instead (zoo_fill below; tests/test_zoo.c has the same in C): tensor `name`, element
i, from the FNV-1a hash of the name and a 32-bit mix of i, computed in integers and then in double, so
that both get the same float32 bits. One eval-mode forward and backward of each model in float64 on a
small batch and input, cross-entropy on fixed targets, recorded compactly: the loss, the logits' norm and 16 of
them, and per parameter the gradient's sum, norm and 4 elements.

    PYTHONPATH=/opt/timm /usr/bin/python3 tools/make_zoo_refs.py --family resnet --batch-size 1 --img-size 32 \
        --models seresnext26t_32x4d resnet101 ... --out tests/data/zoo_refs/resnet.json

A model's create_model kwargs beyond those (ViT options: class_token, global_pool, fc_norm ...) come as a
JSON object per model, recorded in its entry as "kwargs" for tests/test_zoo.c to build the same:

    PYTHONPATH=/opt/timm /usr/bin/python3 tools/make_zoo_refs.py --family vit_kwargs --models vit_small_patch16_224 \
        test_vit test_vit2 --kwargs '{"vit_small_patch16_224": {"class_token": false, "global_pool": "avg"}, ...}' \
        --out tests/data/zoo_refs/vit_kwargs.json

The shipped files: batch 1 at 32 px (vit14: 28 px, patch 14; byobnet: 40 px, so that the shortcut's
ceil-mode average pool meets an odd size; levit: 48 px, LeViT's fixed token grid 48 // 16 = 3, odd for its
subsampled queries) (eval-mode batch norm needs no batch), the smallest model first
(the sanitizer build checks only the first).
"""

import argparse
import json
import math
import os

import torch
import torch.nn.functional as F

import timm

MASK = 0xFFFFFFFF


def fnv1a(name):
    h = 0x811C9DC5
    for c in name.encode():
        h = ((h ^ c) * 0x01000193) & MASK
    return h


def mix(x):
    """murmur3's fmix32 (of an int64 tensor holding 32-bit values)."""
    x ^= x >> 16
    x = (x * 0x85EBCA6B) & MASK
    x ^= x >> 13
    x = (x * 0xC2B2AE35) & MASK
    x ^= x >> 16
    return x


def uniform(name, n):
    """u[i] in [0, 1) for element i of tensor `name`, as doubles."""
    seed = fnv1a(name)
    idx = torch.arange(n, dtype=torch.int64)
    return mix((idx * 0x9E3779B1 + seed) & MASK).to(torch.float64) / 4294967296.0


def zoo_fill(name, shape):
    """The value of every element of tensor `name` (float64, cast to float32 by the caller)."""
    n = math.prod(shape) if shape else 1
    u = uniform(name, n)
    v = 2 * u - 1
    if name.endswith("num_batches_tracked"):
        return torch.zeros(n, dtype=torch.float64)
    if name.endswith("running_var"):
        return 1 + 0.5 * u
    if name.endswith("running_mean"):
        return 0.1 * v
    if len(shape) >= 2:
        fan_in = n // shape[0]
        return v * math.sqrt(3.0 / fan_in)
    if name.endswith("bias"):
        return 0.1 * v
    return 1 + 0.2 * v


def g9(v):
    """v to 9 significant digits: float32's, halving the file."""
    return float(f"{v:.9g}")


def contiguous_grad(_module, _inputs, out):
    out.register_hook(lambda g: g.contiguous())


def record(model_name, batch, img, model_kwargs):
    cfg = timm.models.get_pretrained_cfg(model_name).to_dict()
    kwargs = dict(model_kwargs)
    if cfg.get("fixed_input_size"):
        kwargs["img_size"] = img  # a ViT's position embedding is for one grid
    if cfg.get("num_classes") == 0:
        kwargs["num_classes"] = 1000  # weights without a classifier: the check needs logits
    model = timm.create_model(model_name, **kwargs)
    # eval-mode batch norms (the filled running statistics): a training-mode one normalises by the
    # statistics of a few values per channel at this size, which makes deep stacks chaotic (gradients of
    # ~1e4, 1e-3 apart in float64 by summation order alone); the training-mode op is checked on the test
    # models' vectors
    model.eval()
    with torch.no_grad():
        for name, t in model.state_dict().items():
            vals = zoo_fill(name, list(t.shape)).reshape(t.shape)
            t.copy_(vals.to(t.dtype))
    # float64 from the float32 weights: the reference is then exact to ~1e-12, not torch's float32 rounding,
    # which deep stacks of batch norms over a few values amplify to ~1e-3 (ctimm's ref backend takes doubles)
    model.double()
    # torch 1.13's CPU BatchNorm2d backward reads a channels-last gradient as if it were laid out as its
    # contiguous input (LeViT's stem: the tokens' gradient, transposed back; finite differences agree with
    # the contiguous one), so each batch norm gets its output's gradient contiguous, a no-op elsewhere
    for mod in model.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.register_forward_hook(contiguous_grad)
    classes = model.num_classes
    x = (2 * uniform("input", batch * 3 * img * img) - 1).reshape(batch, 3, img, img).to(torch.float32).double()
    target = torch.tensor([(i * 7) % classes for i in range(batch)])
    logits = model(x)
    loss = F.cross_entropy(logits, target)
    loss.backward()
    flat = logits.detach().reshape(-1).double()
    pick = [int(k * flat.numel() / 16) for k in range(16)]
    grads = {}
    for name, p in model.named_parameters():
        g = p.grad.detach().reshape(-1).double()
        n = g.numel()
        grads[name] = [g9(v) for v in [g.sum().item(), g.norm().item()] + [g[int(k * n / 4)].item() for k in range(4)]]
    extra = {"num_classes": 1000} if "num_classes" in kwargs else {}
    if model_kwargs:
        extra["kwargs"] = model_kwargs
    return {**extra, "loss": loss.item(), "logits_norm": flat.norm().item(), "logits": [[k, g9(flat[k].item())] for k in pick],
            "grads": grads}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", required=True)
    ap.add_argument("--models", nargs="+", required=True)
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--img-size", type=int, default=32)
    ap.add_argument("--kwargs", default="{}", help="JSON: model name -> its create_model kwargs")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(2)
    doc = {"family": args.family, "timm_version": timm.__version__, "torch_version": torch.__version__,
           "batch": args.batch_size, "img_size": args.img_size, "models": {}}
    for m in args.models:
        doc["models"][m] = record(m, args.batch_size, args.img_size, json.loads(args.kwargs).get(m, {}))
        print(m, doc["models"][m]["loss"])
    text = json.dumps(doc, separators=(",", ":")) + "\n"
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print(f"wrote {args.out}: {len(text)} bytes")


if __name__ == "__main__":
    main()
