#!/usr/bin/env python3
"""Write a zoo model's training-mode references (tests/data/zoo_train_refs/<model>.json) with the real timm.

tools/make_zoo_refs.py proves the zoo's models in eval mode; this proves one model per family in
training mode, checked by tests/test_zoo_train.c (whose header says within what). The weights and input
are that tool's formula (zoo_fill, uniform), the model in training mode without dropout or drop path,
everything float64 from the float32 weights. One step on a batch of --batch-size at --img-size px, with
train.py's default loss (label smoothing 0.1) on targets (i * 7) % classes, recorded compactly (per
tensor: sum, norm and 4 elements, 2 for the steps; 7 digits):
  - the loss, the logits' norm and 16 of them, every parameter's gradient;
  - every float buffer after the step (batch norms' running mean and var, timm's momentum);
  - every parameter's change (new - old) by one step of timm's optimizer factory, create_optimizer_v2
    (so no weight decay on biases and 1-D params): "sgd" (nesterov, momentum 0.9, lr 0.1, weight decay
    train.py's default 2e-5) and, from the same start, "adamw" (lr 1e-3, weight decay 0.05). The change
    rather than the new value: the old one is the formula, and the new one's first digits are only that.
Gradients that are float64 noise (structurally zero: a per-channel shift that a training-mode batch norm
removes) are listed in "zero_grads": AdamW's step of such a param is lr * noise / (|noise| + eps).

Training-mode batch norm makes deep residual stacks chaotic when every branch starts at full scale
(zoo_fill gives each batch norm weight ~1): regnety_016's gradients move by 3% when the input moves by
1e-7, and float32 cannot follow. timm's models avoid that with zero_init_last (the last norm of each
branch starts at zero, which would leave the branch without gradients), so the tensors that
zero_init_last() would zero are --last-scale times their formula here ("last_scale", "scaled"): at 0.2
regnety_016's gradients move by ~1e-6. The tool also runs the step in float32 and prints how far torch's
own float32 result is, in units of the test's tolerance ("float32 torch: worst ..."): 0.2 to 0.95 for three
of the shipped models; 20 for seresnext26t_32x4d's stem gradients, a ReLU input crossed (below), which
ctimm's cpu backend crosses too by the machine's kernels (20.6 with CTIMM_CONV=auto on an Intel Xeon, and
with oneDNN's convolutions on an AMD EPYC of AVX2; within 0.22 elsewhere): the test holds its float32 step
to the tolerance no more, as it does not the other models where torch's float32 cannot follow.

A kinked activation (ReLU and its kin, kinks_of) breaks that smoothness: an input nearer its kink than float32's
error may land on the other side in a float32 run, and every gradient upstream of that one element moves by far
more than the tolerance (test_resnet.splits3 on "input": a ReLU input 1.2e-6 of its rms from zero, torch's float32
error there 5.8e-6; ctimm's cpu backend crossed it on one machine's BLAS kernels and not another's, 329 x the
tolerance). The tool prints how many inputs of kinked activations lie nearer a kink than torch's float32 error in
that tensor, and the nearest one's distance in units of it; --input-names K tries the inputs "input", "input.1",
... and keeps the one farthest from the kinks (recorded as "input" in the file), so the float32 check rests on a
margin rather than on luck: test_byobnet's "input.24" (--input-names 100) is 29 times it clear. Deep stacks of
ReLU at batch 2 always have some inputs that near (regnety_016 and seresnext26t_32x4d: 13 and 14 on "input";
the best of 30 inputs leaves 2 and 7, but torch's error is not ctimm's: seresnext26t_32x4d's "input.11" was
crossed by ctimm's cpu backend in three configurations of five, "input" in one), so theirs stay on "input"
(regnety_016's cpu check passes in the configurations ctest runs on the machines tried; seresnext26t_32x4d's
float32 step is not checked, above); and swinv2_tiny_window8_256's
one is in its position-bias MLP, whose input is a constant table: no input moves it.

    PYTHONPATH=/opt/timm /usr/bin/python3 tools/make_zoo_train_refs.py --model regnety_016 \
        --batch-size 2 --img-size 64 --out tests/data/zoo_train_refs/regnety_016.json

The shipped files: mixnet_s, seresnext26t_32x4d, regnety_016, mobilenetv4_conv_small, test_nfnet,
test_byobnet, batch 2 at 64 px (the last stage's batch norms then normalise 8 values per channel);
convnext_nano, poolformer_s12 and resnetv2_50x1_bit, which have none, at 32 px; eva02_tiny_patch14_224 (none
either) at 28 px, built for that size with 1000 classes ("num_classes"), as tools/make_zoo_refs.py builds it;
swin_tiny_patch4_window7_224 at 32 px (its first stage's 8x8 grid padded to 14x14 windows, shifted and masked);
test_maxvit, batch 2 at 64 px (2x2 windows and grids, the smallest partition with more than one token);
swinv2_tiny_window8_256 at 48 px, batch 2; levit_128s at 128 px, batch 4 (its training-mode BatchNorm1d over 8 tokens
a channel in the last stage; at 48 px it normalises 2 values and float32 cannot follow).

AugMix split training (train.py's --aug-splits S --split-bn --jsd-loss): the batch is S splits, every batch norm
timm's SplitBatchNorm2d (convert_splitbn_model; its aux_bn tensors filled by the formula like the others) and the
loss JsdCrossEntropy(S, smoothing 0.1) on the first split's targets. The shipped test_resnet.splits3.json:

    PYTHONPATH=/opt/timm /usr/bin/python3 tools/make_zoo_train_refs.py --model test_resnet --batch-size 6 \
        --img-size 64 --aug-splits 3 --split-bn --jsd-loss --input-names 200 \
        --out tests/data/zoo_train_refs/test_resnet.splits3.json

(it keeps "input.133": every ReLU input at least 3.5 times torch's float32 error in its tensor from zero).
"""

import argparse
import copy
import json
import math
import os

import torch

import timm
from timm.layers import convert_splitbn_model
from timm.loss import JsdCrossEntropy, LabelSmoothingCrossEntropy
from timm.optim import create_optimizer_v2

from make_zoo_refs import uniform, zoo_fill

SMOOTHING = 0.1  # train.py's --smoothing
# create_optimizer_v2's arguments. SGD's weight decay is train.py's default; AdamW's is its recipes' 0.05:
# with 2e-5 its decoupled decay (lr * wd * param, ~1e-9) would vanish next to its step (~lr)
OPTIMIZERS = {"sgd": {"opt": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 2e-5},
              "adamw": {"opt": "adamw", "lr": 1e-3, "weight_decay": 0.05}}


def last_tensors(model):
    """The state_dict names zero_init_last() zeros (each block that has one)."""
    probe = copy.deepcopy(model)
    with torch.no_grad():
        for t in probe.state_dict().values():
            if t.is_floating_point():
                t.fill_(1)
    for m in probe.modules():
        if hasattr(m, "zero_init_last"):
            m.zero_init_last()
    return [n for n, t in probe.state_dict().items() if t.is_floating_point() and not t.any()]


def fill(model, scaled, scale):
    with torch.no_grad():
        for name, t in model.state_dict().items():
            v = zoo_fill(name, list(t.shape))
            if name in scaled:
                v = v * scale
            t.copy_(v.reshape(t.shape).to(t.dtype))


def compact(t, picks):
    """sum, norm and `picks` elements (at i * n / picks) of t, as doubles."""
    f = t.detach().reshape(-1).double()
    n = f.numel()
    return [f.sum().item(), f.norm().item()] + [f[int(k * n / picks)].item() for k in range(picks)]


def g7(v):
    """v to 7 significant digits: plenty for a test within 1e-4, and half the file of 17."""
    return float(f"{v:.7g}")


def size_kwargs(model_name, img):
    """create_model's kwargs for the step at img px with logits, as tools/make_zoo_refs.py's: a ViT's position
    embedding (and RoPE table) is for one grid, and weights without a classifier get one of 1000 classes."""
    cfg = timm.models.get_pretrained_cfg(model_name).to_dict()
    kwargs = {"img_size": img} if cfg.get("fixed_input_size") else {}
    if cfg.get("num_classes") == 0:
        kwargs["num_classes"] = 1000
    return kwargs


def create(model_name, img, splits, **kwargs):
    """The model, its batch norms split as train.py's --split-bn does when splits > 1."""
    model = timm.create_model(model_name, **kwargs, **size_kwargs(model_name, img))
    return convert_splitbn_model(model, max(splits, 2)) if splits else model


def kinks_of(m):
    """Where module m's activation has kinks (none: smooth, or not an activation)."""
    if isinstance(m, (torch.nn.ReLU, torch.nn.LeakyReLU)):
        return (0.0,)
    if isinstance(m, torch.nn.ReLU6):
        return (0.0, 6.0)
    if isinstance(m, torch.nn.Hardtanh):
        return (m.min_val, m.max_val)
    if isinstance(m, (torch.nn.Hardswish, torch.nn.Hardsigmoid)):
        return (-3.0, 3.0)
    return ()


def run(model_name, batch, img, scaled, scale, dtype, splits, jsd, input_name="input"):
    """The full record, unrounded, of the step in dtype (on float32 weights and input), with the inputs of
    its kinked activations (kinks_of) under "kinks"."""
    model = create(model_name, img, splits, drop_rate=0.0, drop_path_rate=0.0)
    fill(model, scaled, scale)
    model.to(dtype)
    model.train()
    kinks = []
    for name, m in model.named_modules():
        if kinks_of(m):
            m.register_forward_pre_hook(
                lambda m, i, name=name: kinks.append((name, kinks_of(m), i[0].detach().double().clone())))
    classes = model.num_classes
    x = (2 * uniform(input_name, batch * 3 * img * img) - 1).reshape(batch, 3, img, img).to(torch.float32).to(dtype)
    target = torch.tensor([(i * 7) % classes for i in range(batch)])
    logits = model(x)
    loss_fn = JsdCrossEntropy(num_splits=jsd, smoothing=SMOOTHING) if jsd else LabelSmoothingCrossEntropy(SMOOTHING)
    loss = loss_fn(logits, target)
    loss.backward()
    flat = logits.detach().reshape(-1).double()
    rec = {"loss": loss.item(), "logits_norm": flat.norm().item(),
           "logits": [[k, flat[k].item()] for k in (int(j * flat.numel() / 16) for j in range(16))],
           "grads": {n: compact(p.grad, 4) for n, p in model.named_parameters()},
           # the state_dict's: a non-persistent buffer (a RoPE table) is a constant of the model
           "buffers": {n: compact(b, 4) for n, b in model.named_buffers()
                       if b.is_floating_point() and n in model.state_dict()}}
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    for key, o in OPTIMIZERS.items():
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(start[n])
        create_optimizer_v2(model, **o).step()
        rec[key] = {n: compact(p.detach() - start[n], 2) for n, p in model.named_parameters()}
    rec["start_abs"] = {n: compact(p.abs(), 2) for n, p in start.items()}
    rec["kinks"] = kinks
    return rec


def kinks_at_risk(ref, got):
    """How many inputs of kinked activations lie closer to a kink in ref than got's largest error in that
    tensor (got's run may put them on the other side), and the closest one: (its distance / that error, where)."""
    risky, worst, where = 0, math.inf, ""
    for (name, at, x), (_, _, y) in zip(ref["kinks"], got["kinks"]):
        drift = (y - x).abs().max().item()
        d = torch.stack([(x - k).abs() for k in at]).amin(0)
        risky += int((d < drift).sum())
        if drift > 0 and d.min().item() / drift < worst:
            worst, where = d.min().item() / drift, name
    return risky, worst, where


def adamw_slack(grad, e, n, lr, eps=1e-8):
    """How far AdamW's first step of element e (of 2: the gradient's element 2 e of 4) may move when the
    gradient is off by its tolerance d: the step is lr * g / (|g| + eps), whose slope is eps / (|g| + eps)^2;
    anything within 2 lr once d reaches |g|."""
    g, d = abs(grad[2 + 2 * e]), 1e-4 * grad[1] / math.sqrt(n)
    return 2 * lr if d >= g else min(2 * lr, lr * eps * d / (g - d + eps) ** 2)


def deviation(ref, got, numel, lr, ulp):
    """max over the recorded numbers of |got - ref| in units of tests/test_zoo_train.c's tolerance, and which
    number. Within 1e-4 of: the loss; the logits' rms; per tensor its rms (an element: the larger of that and
    itself; the sum n times it, the norm sqrt(n) times). A structurally zero gradient is noise: its elements
    within 1e-4 of the largest rms of the group, and AdamW's step of it anywhere within lr. A step is the
    difference of two params stored in got's precision: besides, 2 ulps (ulp: relative) of the param."""
    worst, where = 0.0, ""

    def see(g, w, tol, what):
        nonlocal worst, where
        if abs(g - w) / tol > worst:
            worst, where = abs(g - w) / tol, what
    see(got["loss"], ref["loss"], 1e-4 * abs(ref["loss"]), "loss")
    lrms = ref["logits_norm"] / math.sqrt(numel["logits"])
    for (k, w), (_, g) in zip(ref["logits"], got["logits"]):
        see(g, w, 1e-4 * lrms, "logit")
    for group in ("grads", "buffers", "sgd", "adamw"):
        top = max((v[1] / math.sqrt(numel[n]) for n, v in ref[group].items()), default=0)
        for n, v in ref[group].items():
            k, g = numel[n], got[group][n]
            p = [2 * ulp * x for x in got["start_abs"][n]] if group in OPTIMIZERS else [0] * 6
            if n in ref["zero_grads"] and group != "buffers":
                for e in range(2, len(v)):
                    see(g[e], 0, (lr if group == "adamw" else 1e-4 * top) + p[e], f"{group} {n} element")
                continue
            s = v[1] / math.sqrt(k)
            # AdamW's first step moves each element by about lr * sign(gradient): float32's error flips the few
            # whose gradient is below it (~1e-5 of the tensor's rms); two such anywhere move sum and norm 4 lr
            flips = 4 * lr if group == "adamw" else 0
            see(g[1], v[1], 1e-4 * s * math.sqrt(k) + flips + p[1], f"{group} {n} norm")
            see(g[0], v[0], 1e-4 * s * k + flips + p[0], f"{group} {n} sum")
            for e in range(2, len(v)):
                slack = adamw_slack(ref["grads"][n], e - 2, numel[n], lr) if group == "adamw" else 0
                see(g[e], v[e], 1e-4 * max(s, abs(v[e])) + slack + p[e], f"{group} {n} element")
    return worst, where


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--img-size", type=int, default=64)
    ap.add_argument("--last-scale", type=float, default=0.2)
    ap.add_argument("--aug-splits", type=int, default=0, help="the batch is this many splits (train.py's)")
    ap.add_argument("--split-bn", action="store_true", help="train.py's: SplitBatchNorm2d of --aug-splits splits")
    ap.add_argument("--jsd-loss", action="store_true", help="train.py's: JsdCrossEntropy over --aug-splits splits")
    ap.add_argument("--input-names", type=int, default=1,
                    help="try this many inputs (input, input.1, ...) and keep the one farthest from the kinks")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(2)
    splits = args.aug_splits if args.split_bn else 0
    jsd = args.aug_splits if args.jsd_loss else 0
    probe = create(args.model, args.img_size, splits)
    scaled = last_tensors(probe)
    numel = {n: p.numel() for n, p in list(probe.named_parameters()) + list(probe.named_buffers())}
    numel["logits"] = args.batch_size * probe.num_classes
    best = None
    for k in range(args.input_names):
        name = "input" if k == 0 else f"input.{k}"
        ref = run(args.model, args.batch_size, args.img_size, scaled, args.last_scale, torch.float64, splits, jsd, name)
        f32 = run(args.model, args.batch_size, args.img_size, scaled, args.last_scale, torch.float32, splits, jsd, name)
        risky, closest, where = kinks_at_risk(ref, f32)
        if args.input_names > 1:
            print(f"{args.model}: input {name!r}: the nearest input of a kinked activation {closest:.3g} x float32's"
                  f" error there ({where})")
        if best is None or closest > best[4]:
            best = (name, ref, f32, risky, closest, where)
    name, ref, f32, risky, closest, where = best
    total = math.sqrt(sum(v[1] ** 2 for v in ref["grads"].values()))
    ref["zero_grads"] = [n for n, v in ref["grads"].items() if v[1] <= 1e-12 * total]
    worst, where32 = deviation(ref, f32, numel, OPTIMIZERS["adamw"]["lr"], 2.0 ** -23)
    print(f"{args.model}: input {name!r}: loss {ref['loss']:.9g}; float32 torch: worst {worst:.3g} x the test's"
          f" tolerance ({where32}); {len(ref['zero_grads'])} structurally zero gradients")
    if ref["kinks"]:
        print(f"{args.model}: {risky} inputs of kinked activations nearer a kink than float32's error there"
              f" (the nearest {closest:.3g} x it, {where})")

    params = list(ref["grads"])
    doc = {"model": args.model, "timm_version": timm.__version__, "torch_version": torch.__version__,
           **({"num_classes": probe.num_classes} if "num_classes" in size_kwargs(args.model, args.img_size) else {}),
           "batch": args.batch_size, "img_size": args.img_size, "smoothing": SMOOTHING, "optimizers": OPTIMIZERS,
           **({"split_bn": splits} if splits else {}), **({"jsd_splits": jsd} if jsd else {}),
           **({"input": name} if name != "input" else {}),
           "last_scale": args.last_scale if scaled else 1.0, "scaled": scaled,
           "loss": ref["loss"], "logits_norm": ref["logits_norm"],
           "logits": [[k, g7(v)] for k, v in ref["logits"]], "zero_grads": ref["zero_grads"],
           "params": params, "buffers": [[n] + [g7(x) for x in v] for n, v in ref["buffers"].items()]}
    for group in ("grads", "sgd", "adamw"):
        doc[group] = [[g7(x) for x in ref[group][n]] for n in params]
    text = json.dumps(doc, separators=(",", ":")) + "\n"
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print(f"wrote {args.out}: {len(text)} bytes")


if __name__ == "__main__":
    main()
