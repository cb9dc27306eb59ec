#!/usr/bin/env python3
"""Check that a ctimm-train checkpoint is a timm checkpoint: load it into the real timm and
compare eval logits with ctimm-run's on the same random batch.

    PYTHONPATH=/opt/timm /usr/bin/python3 tools/check_checkpoint.py out/model_best.safetensors \
        [--ctimm-run build/ctimm-run] [--backend cpu] [--batch-size 4] [--img-size 32] [--tol 1e-4]

The model name and class count come from the checkpoint's metadata (ctimm.model,
ctimm.num_classes). timm loads the file with load_state_dict(strict=True), so a missing or
extra tensor fails here. Not part of CI (it needs torch and timm). The safetensors format is
read and written by hand (no PyPI package), like tools/make_vectors.py.
"""

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_vectors import save_safetensors  # noqa: E402  (pins the CPU kernels, imports torch)

import torch  # noqa: E402

_DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
           "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
           "U8": torch.uint8, "BOOL": torch.bool}


def load_safetensors(path):
    """-> (dict name -> tensor in file order, metadata dict)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {}) or {}
    data = blob[8 + n:]
    out = {}
    for name, h in header.items():
        b, e = h["data_offsets"]
        if e > len(data):
            raise SystemExit(f"{path}: tensor {name} ends at byte {e} of {len(data)}: truncated")
        t = torch.frombuffer(bytearray(data[b:e]), dtype=_DTYPES[h["dtype"]]) if e > b else \
            torch.empty(0, dtype=_DTYPES[h["dtype"]])
        out[name] = t.reshape(h["shape"]).clone()
    return out, meta


def main():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--ctimm-run", default=os.path.join(here, "build", "ctimm-run"))
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--img-size", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tol", type=float, default=1e-4, help="max |diff| / max |logit|")
    args = ap.parse_args()

    import timm
    state, meta = load_safetensors(args.checkpoint)
    model_name, classes = meta.get("ctimm.model"), int(meta.get("ctimm.num_classes", "-1"))
    if not model_name:
        raise SystemExit(f"{args.checkpoint}: no ctimm.model metadata; not a ctimm-train checkpoint")
    kwargs = {}
    if timm.models.get_pretrained_cfg(model_name).fixed_input_size:
        kwargs['img_size'] = args.img_size  # built for the size it was trained at, as ctimm-train builds it
    model = timm.create_model(model_name, pretrained=False, num_classes=classes, **kwargs)
    model.load_state_dict(state, strict=True)
    model.eval()

    g = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.batch_size, 3, args.img_size, args.img_size, generator=g)
    target = torch.zeros(args.batch_size, dtype=torch.int64)
    with torch.no_grad():
        ref = model(x)

    with tempfile.TemporaryDirectory() as tmp:
        vec, out = os.path.join(tmp, "vectors.safetensors"), os.path.join(tmp, "out.safetensors")
        save_safetensors(vec, [("input", x), ("target", target)], {"num_classes": str(classes)})
        cmd = [args.ctimm_run, "--model", model_name, "--num-classes", str(classes), "--backend", args.backend,
               "--weights", args.checkpoint, "--vectors", vec, "--out", out]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        got = load_safetensors(out)[0]["logits.eval"]

    diff = (got - ref).abs().max().item()
    scale = ref.abs().max().item()
    same_top1 = bool((got.argmax(1) == ref.argmax(1)).all())
    print(f"{model_name} ({classes} classes, epoch {meta.get('ctimm.epoch')}): timm loaded "
          f"{len(state)} tensors strictly; logits {tuple(ref.shape)}, max |timm| {scale:.4g}, "
          f"max |ctimm - timm| {diff:.3g} (relative {diff / max(scale, 1e-30):.3g}), "
          f"same argmax: {same_top1}")
    if diff > args.tol * max(scale, 1e-30) or not same_top1:
        raise SystemExit("FAIL")


if __name__ == "__main__":
    main()
