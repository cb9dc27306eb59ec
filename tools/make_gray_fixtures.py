#!/usr/bin/env python3
"""Write tests/data/gray/: what PIL and timm make of gray ('L') images, train.py's input_img_mode
for in_chans 1, for tests/test_image.c and tests/test_transforms.c.

    PYTHONPATH=/opt/timm /usr/bin/python3 tools/make_gray_fixtures.py

Outputs (raw 8-bit 'L' pixels, row-major, a few hundred bytes each):
  decode.txt, <image>.L     Image.open(tests/data/images/<image>).convert('L'): PIL's luma of every
                            mode it decodes (RGB, CMYK, L, P, LA, RGBA, 16-bit)
                            "<image> <w> <h> <expected>"
  color.txt, color*.L       torchvision.transforms.functional's colour adjustments and
                            gaussian_blur (kernel 23), and PIL's GaussianBlur, on
                            tests/data/transforms/src.ppm converted to 'L'
                            "<adjustment> <factor> <expected>"
  eval.txt, eval*.L         timm's transforms_imagenet_eval on tests/data/transforms/eval_src.png
                            converted to 'L' "<crop_mode> <interpolation> <img_size> <crop_pct> <expected>"
  rrc.txt, rrc*.L           torchvision's resized_crop of that 'L' image
                            "<x> <y> <w> <h> <interpolation> <size> <expected>"
"""
import os

import numpy as np
from PIL import Image, ImageFilter
import torchvision.transforms.functional as TF
from torchvision.transforms import InterpolationMode

from timm.data.transforms_factory import transforms_imagenet_eval

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data")
OUT = os.path.join(ROOT, "gray")
IMAGES = ["rgb.jpg", "grey.jpg", "cmyk.jpg", "rgb.png", "rgba.png", "la.png", "pal8.png", "rgb16.png", "grey16.png"]
COLOR = [("brightness", 0.6), ("contrast", 1.4), ("saturation", 0.0), ("saturation", 1.33), ("hue", 0.12),
         # the '3a' policy's blur and torchvision's GaussianBlur(23), both of which timm applies to 'L' images
         ("pil_gaussian_blur", 1.3), ("gaussian_blur", 0.9)]
EVAL = [("center", "bicubic", 32, 0.875), ("squash", "bilinear", 32, 0.875), ("center", "bilinear", 40, 1.25)]
RRC = [(5, 3, 40, 30, "bilinear", 16), (0, 0, 61, 45, "bicubic", 24)]
TV_INTERP = {"nearest": InterpolationMode.NEAREST, "bilinear": InterpolationMode.BILINEAR,
             "bicubic": InterpolationMode.BICUBIC}


def save(name, img):
    assert img.mode == "L", name
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(img.tobytes())


def manifest(name, head, lines):
    with open(os.path.join(OUT, name), "w") as f:
        f.write(head + "\n" + "\n".join(lines) + "\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    lines = []
    for name in IMAGES:
        img = Image.open(os.path.join(ROOT, "images", name)).convert("L")
        save(name + ".L", img)
        lines.append("%s %d %d %s.L" % (name, img.width, img.height, name))
    manifest("decode.txt", "# input w h expected (Image.open(input).convert('L'))", lines)

    src = Image.open(os.path.join(ROOT, "transforms", "src.ppm")).convert("L")
    fns = {"brightness": TF.adjust_brightness, "contrast": TF.adjust_contrast,
           "saturation": TF.adjust_saturation, "hue": TF.adjust_hue,
           "pil_gaussian_blur": lambda img, r: img.filter(ImageFilter.GaussianBlur(r)),
           "gaussian_blur": lambda img, s: TF.gaussian_blur(img, [23, 23], [s, s])}
    lines = []
    for k, (adj, factor) in enumerate(COLOR):
        fn = "color%02d_%s.L" % (k, adj)
        save(fn, fns[adj](src, factor))
        lines.append("%s %r %s" % (adj, factor, fn))
    manifest("color.txt", "# adjustment factor expected (src.ppm as 'L'; torchvision.transforms.functional)", lines)

    eval_src = Image.open(os.path.join(ROOT, "transforms", "eval_src.png")).convert("L")
    lines = []
    for k, (mode, interp, size, pct) in enumerate(EVAL):
        tf = transforms_imagenet_eval(size, crop_pct=pct, crop_mode=mode, interpolation=interp, use_prefetcher=True)
        res = np.asarray(tf(eval_src))[0]  # MaybePILToTensor: [1, H, W] uint8
        fn = "eval%02d_%s_%s.L" % (k, mode, interp)
        save(fn, Image.fromarray(np.ascontiguousarray(res), "L"))
        lines.append("%s %s %d %r %s" % (mode, interp, size, pct, fn))
    manifest("eval.txt", "# crop_mode interpolation img_size crop_pct expected (eval_src.png as 'L')", lines)

    lines = []
    for k, (x, y, w, h, interp, size) in enumerate(RRC):
        fn = "rrc%02d_%s.L" % (k, interp)
        save(fn, TF.resized_crop(eval_src, y, x, h, w, [size, size], TV_INTERP[interp]))
        lines.append("%d %d %d %d %s %d %s" % (x, y, w, h, interp, size, fn))
    manifest("rrc.txt", "# x y w h interpolation size expected (eval_src.png as 'L'; resized_crop)", lines)


if __name__ == "__main__":
    main()
