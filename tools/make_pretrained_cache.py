#!/usr/bin/env python3
"""A Hugging Face hub cache of timm weights, and timm's own numbers for them, for
tests/test_pretrained.c's comparison with timm (CTest pretrained_timm, which runs this into
the build tree when timm is importable; the files are tens of KB to a few MB, never committed).

    PYTHONPATH=/opt/timm /usr/bin/python3 tools/make_pretrained_cache.py OUT

For each model (small ones that ctimm and timm both register) it writes, from timm's random
init (seeded, no network):
  OUT/hub/models--timm--<model>.<tag>/           huggingface_hub's layout: refs/main, blobs/<sha256>,
      snapshots/<rev>/model.safetensors            a link into blobs/, the state_dict without
      snapshots/<rev>/config.json                  num_batches_tracked (hub files often lack it), and
                                                   timm's save_config_for_hf config
  OUT/<model>.pth.tar                              a train.py checkpoint whose state_dict_ema is that
                                                   state_dict (its state_dict another: timm's
                                                   load_state_dict takes the EMA), for --pretrained-path
  OUT/ref_<model>.safetensors:
      input         [2, 3, S, S] at the cfg's size S
      logits        the model's eval logits for it (pretrained=True from the cache's weights)
      adapted.<k>   timm's create_model(model, pretrained=True, pretrained_cfg_overlay=dict(file=<pth.tar>),
                    num_classes=K, img_size=I).state_dict(): load_pretrained's adaptation (a new classifier,
                    a resampled pos_embed, resized relative position bias tables), to compare tensor by tensor
      in<C>.<first_conv>.weight  the stem of create_model(model, pretrained=True, pretrained_cfg_overlay=
                    dict(file=<pth.tar>), in_chans=C) for C in IN_CHANS: adapt_input_conv's weight
    metadata: model, tag, num_classes (K), img_size (I), in_chans (the C, comma-separated)
Only torch and timm are needed: safetensors is written by hand, as tools/make_vectors.py does.
"""
import argparse
import hashlib
import json
import os
import struct
import sys

import torch
import timm
from timm.models import get_pretrained_cfg
from timm.models._hub import save_config_for_hf

# (model, the fine-tuning run's num_classes, its img_size: None keeps the cfg's)
MODELS = [("test_resnet", 7, None), ("test_vit", 7, 96), ("test_maxvit", 7, 96)]
REVISION = "0123456789abcdef0123456789abcdef01234567"  # a commit hash's shape; any name works
IN_CHANS = (1, 4)  # adapt_input_conv's sum (1) and repeat-and-scale (4: 3 channels then the first again)

_ST_DTYPES = {torch.float32: "F32", torch.int64: "I64"}


def safetensors_bytes(tensors, metadata):
    """tensors: list of (name, tensor) in file order."""
    header = {"__metadata__": metadata}
    blobs, off = [], 0
    for name, t in tensors:
        b = t.detach().cpu().contiguous().numpy().tobytes()
        header[name] = {"dtype": _ST_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def write(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def hub_repo(out, model, tag, sd, config_model):
    """The repo timm/<model>.<tag> as huggingface_hub's download leaves it."""
    repo = os.path.join(out, "hub", f"models--timm--{model}.{tag}")
    snap = os.path.join(repo, "snapshots", REVISION)
    os.makedirs(os.path.join(repo, "blobs"), exist_ok=True)
    os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
    os.makedirs(snap, exist_ok=True)
    data = safetensors_bytes(list(sd.items()), {"format": "pt"})
    blob = hashlib.sha256(data).hexdigest()
    write(os.path.join(repo, "blobs", blob), data)
    link = os.path.join(snap, "model.safetensors")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(os.path.join("..", "..", "blobs", blob), link)
    save_config_for_hf(config_model, os.path.join(snap, "config.json"))
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(REVISION)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_grad_enabled(False)
    for i, (model, classes, img) in enumerate(MODELS):
        torch.manual_seed(1000 + i)
        m = timm.create_model(model).eval()
        if getattr(m, "pos_embed", None) is not None:  # values of order 1 (not timm's init's 0.02), to resample
            m.pos_embed.normal_()
        tag = get_pretrained_cfg(model).tag
        sd = {k: v for k, v in m.state_dict().items() if not k.endswith("num_batches_tracked")}
        hub_repo(args.out, model, tag, sd, m)
        pth = os.path.join(args.out, f"{model}.pth.tar")
        other = {k: v + 1 if v.is_floating_point() else v for k, v in sd.items()}
        torch.save({"epoch": 3, "arch": model, "state_dict": other, "state_dict_ema": sd}, pth)
        size = m.pretrained_cfg["input_size"][-1]
        x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(7 + i))
        logits = m(x)
        kw = dict(num_classes=classes)
        if img:
            kw["img_size"] = img
        tuned = timm.create_model(model, pretrained=True, pretrained_cfg_overlay=dict(file=pth), **kw)
        tensors = [("input", x), ("logits", logits)]
        tensors += [("adapted." + k, v) for k, v in tuned.state_dict().items()]
        stem = m.pretrained_cfg["first_conv"] + ".weight"
        for c in IN_CHANS:
            gray = timm.create_model(model, pretrained=True, pretrained_cfg_overlay=dict(file=pth), in_chans=c)
            tensors.append((f"in{c}.{stem}", gray.state_dict()[stem]))
        meta = {"model": model, "tag": tag, "num_classes": str(classes), "img_size": str(img or size),
                "in_chans": ",".join(map(str, IN_CHANS))}
        write(os.path.join(args.out, f"ref_{model}.safetensors"), safetensors_bytes(tensors, meta))
        print(f"{model}.{tag}: hub cache, {model}.pth.tar, ref_{model}.safetensors")


if __name__ == "__main__":
    sys.exit(main())
