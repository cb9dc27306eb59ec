#!/usr/bin/env python3
"""Check ctimm-validate against timm's own validate.py: the same checkpoint, the same
folder, the same settings; top-1 and top-5 must be equal.

    PYTHONPATH=/opt/timm /usr/bin/python3 tools/check_validate.py CKPT.safetensors DATA_DIR \
        [--split val] [--img-size 32] [--ctimm-validate build/ctimm-validate] [-b 64]

validate.py is not in the pip package: it is read from the timm repository mirror
($TIMM_REPO, default /work/.mirror/huggingface+pytorch-image-models/repo) with git show.
The checkpoint is handed to timm as a .pth (no safetensors package here). The model name
and class count come from the checkpoint's metadata. Not part of CI (it needs torch and timm).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_checkpoint import load_safetensors  # noqa: E402

import torch  # noqa: E402


def result_of(stdout):
    return json.loads(stdout.split("--result\n", 1)[1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("data")
    ap.add_argument("--split", default="val")
    ap.add_argument("--img-size", type=int, default=32)
    ap.add_argument("-b", "--batch-size", type=int, default=64)
    ap.add_argument("--ctimm-validate", default="build/ctimm-validate")
    args = ap.parse_args()
    tensors, meta = load_safetensors(args.checkpoint)
    model, classes = meta["ctimm.model"], meta["ctimm.num_classes"]
    repo = os.environ.get("TIMM_REPO", "/work/.mirror/huggingface+pytorch-image-models/repo")
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "validate.py")
        with open(script, "w") as f:
            f.write(subprocess.check_output(["git", "-C", repo, "show", "HEAD:validate.py"], text=True))
        pth = os.path.join(tmp, "ckpt.pth")
        torch.save({"state_dict": tensors}, pth)
        common = [args.data, "--split", args.split, "--model", model, "--num-classes", classes,
                  "--img-size", str(args.img_size), "-b", str(args.batch_size), "-j", "2"]
        timm = result_of(subprocess.run([sys.executable, script, *common, "--checkpoint", pth, "--device", "cpu"],
                                        check=True, capture_output=True, text=True).stdout)
        ours = result_of(subprocess.run([args.ctimm_validate, *common, "--checkpoint", args.checkpoint],
                                        check=True, capture_output=True, text=True).stdout)
    print(f"timm : top1 {timm['top1']} top5 {timm['top5']} ({timm['img_size']}px crop {timm['crop_pct']} "
          f"{timm['interpolation']})")
    print(f"ctimm: top1 {ours['top1']} top5 {ours['top5']} ({ours['img_size']}px crop {ours['crop_pct']} "
          f"{ours['interpolation']})")
    same = all(timm[k] == ours[k] for k in ("top1", "top5", "img_size", "crop_pct", "interpolation"))
    print("equal" if same else "DIFFERENT")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
