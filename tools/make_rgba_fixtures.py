#!/usr/bin/env python3
"""Write tests/data/rgba/: what PIL, torchvision and timm make of 'RGBA' images (train.py's and
validate.py's --input-img-mode RGBA with --in-chans 4), for tests/test_rgba.c.

    PYTHONPATH=/opt/timm /usr/bin/python3 tools/make_rgba_fixtures.py

Outputs (raw 8-bit RGBA pixels, row-major):
  trns_rgb.png, trns_l.png  small RGB and 'L' PNGs whose tRNS colour some pixels have
  decode.txt, <image>.rgba  Image.open(tests/data/<image>).convert('RGBA') for every kind of image PIL
                            decodes in tests/data/images and the two above: alpha bands, tRNS colours
                            and palettes, 16-bit, Adam7, JPEGs "<image> <w> <h> <expected>"
  src.png                   the source of the rest: tests/data/transforms/eval_src.png's colours under
                            an alpha of every kind (0, 255, ramps), 61 x 45
  color.txt, color*.rgba    torchvision.transforms.functional's colour adjustments and gaussian_blur
                            (kernel 23) of src.png "<adjustment> <factor> <expected>"
  eval.txt, eval*.rgba      timm's transforms_imagenet_eval of src.png
                            "<crop_mode> <interpolation> <img_size> <crop_pct> <expected>"
  rrc.txt, rrc*.rgba        torchvision's resized_crop of src.png, then (flip 1) hflip
                            "<x> <y> <w> <h> <interpolation> <size> <flip> <expected>"
  rkr.txt, rkr*.rgba        timm's rkrc/rkrr crop with fixed draws: src.png resized to rw x rh
                            (torchvision's resize), then timm's crop_or_pad at (top, left) with
                            reflect padding "<rw> <rh> <interpolation> <top> <left> <size> <expected>"
"""
import os

import numpy as np
from PIL import Image
import torchvision.transforms.functional as TF
from torchvision.transforms import InterpolationMode

from timm.data.transforms import crop_or_pad
from timm.data.transforms_factory import transforms_imagenet_eval

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data")
OUT = os.path.join(ROOT, "rgba")
IMAGES = ["images/" + n for n in ["rgb.jpg", "grey.jpg", "cmyk.jpg", "rgb.png", "rgba.png", "rgba16_adam7.png",
                                   "la.png", "la16.png", "pal8.png", "pal2_short_adam7.png", "rgb_trns.png",
                                   "grey4_trns.png", "grey16.png", "grey1.png"]] + ["rgba/trns_rgb.png",
                                                                                   "rgba/trns_l.png"]
COLOR = [("brightness", 0.6), ("contrast", 1.4), ("saturation", 0.0), ("saturation", 1.33), ("hue", 0.12),
         ("gaussian_blur", 0.9)]
EVAL = [("center", "bicubic", 32, 0.875), ("squash", "bilinear", 32, 0.875), ("center", "bilinear", 40, 1.25),
        ("center", "nearest", 24, 0.9)]
RRC = [(5, 3, 40, 30, "bilinear", 16, 0), (0, 0, 61, 45, "bicubic", 24, 1), (7, 9, 20, 20, "nearest", 12, 0),
       (11, 4, 24, 24, "bilinear", 24, 1)]
RKR = [(40, 30, "bilinear", -3, 5, 32), (70, 52, "bicubic", 9, -4, 48)]
TV_INTERP = {"nearest": InterpolationMode.NEAREST, "bilinear": InterpolationMode.BILINEAR,
             "bicubic": InterpolationMode.BICUBIC}


def save(name, img):
    assert img.mode == "RGBA", name
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(img.tobytes())


def manifest(name, head, lines):
    with open(os.path.join(OUT, name), "w") as f:
        f.write(head + "\n" + "\n".join(lines) + "\n")


def make_src():
    rgb = np.asarray(Image.open(os.path.join(ROOT, "transforms", "eval_src.png")).convert("RGB"))
    h, w = rgb.shape[:2]
    y, x = np.mgrid[0:h, 0:w]
    alpha = (x * 255 // (w - 1)).astype(np.uint8)       # a ramp left to right
    alpha[(y // 6 + x // 7) % 3 == 0] = 255              # opaque patches
    alpha[5:14, 30:44] = 0                              # a transparent block
    alpha[30:, :12] = (y[30:, :12] * 37 % 256)          # noise at the corner
    return Image.fromarray(np.dstack([rgb, alpha]), "RGBA")


def make_trns():
    rng = np.random.default_rng(3)
    rgb = rng.integers(0, 4, (9, 11, 3), dtype=np.uint8) * 60
    Image.fromarray(rgb, "RGB").save(os.path.join(OUT, "trns_rgb.png"), transparency=tuple(int(v) for v in rgb[0, 0]))
    grey = rng.integers(0, 4, (9, 11), dtype=np.uint8) * 80
    Image.fromarray(grey, "L").save(os.path.join(OUT, "trns_l.png"), transparency=160)


def main():
    os.makedirs(OUT, exist_ok=True)
    make_trns()
    lines = []
    for name in IMAGES:
        img = Image.open(os.path.join(ROOT, name)).convert("RGBA")
        base = os.path.basename(name)
        save(base + ".rgba", img)
        lines.append("%s %d %d %s.rgba" % (name, img.width, img.height, base))
    manifest("decode.txt", "# input w h expected (Image.open(input).convert('RGBA'))", lines)

    src = make_src()
    src.save(os.path.join(OUT, "src.png"))
    src = Image.open(os.path.join(OUT, "src.png")).convert("RGBA")
    fns = {"brightness": TF.adjust_brightness, "contrast": TF.adjust_contrast,
           "saturation": TF.adjust_saturation, "hue": TF.adjust_hue,
           "gaussian_blur": lambda img, s: TF.gaussian_blur(img, [23, 23], [s, s])}
    lines = []
    for k, (adj, factor) in enumerate(COLOR):
        fn = "color%02d_%s.rgba" % (k, adj)
        save(fn, fns[adj](src, factor))
        lines.append("%s %r %s" % (adj, factor, fn))
    manifest("color.txt", "# adjustment factor expected (src.png; torchvision.transforms.functional)", lines)

    lines = []
    for k, (mode, interp, size, pct) in enumerate(EVAL):
        tf = transforms_imagenet_eval(size, crop_pct=pct, crop_mode=mode, interpolation=interp, use_prefetcher=True)
        res = np.asarray(tf(src)).transpose(1, 2, 0)  # MaybePILToTensor: [4, H, W] uint8
        fn = "eval%02d_%s_%s.rgba" % (k, mode, interp)
        save(fn, Image.fromarray(np.ascontiguousarray(res), "RGBA"))
        lines.append("%s %s %d %r %s" % (mode, interp, size, pct, fn))
    manifest("eval.txt", "# crop_mode interpolation img_size crop_pct expected (src.png)", lines)

    lines = []
    for k, (x, y, w, h, interp, size, flip) in enumerate(RRC):
        fn = "rrc%02d_%s.rgba" % (k, interp)
        img = TF.resized_crop(src, y, x, h, w, [size, size], TV_INTERP[interp])
        save(fn, TF.hflip(img) if flip else img)
        lines.append("%d %d %d %d %s %d %d %s" % (x, y, w, h, interp, size, flip, fn))
    manifest("rrc.txt", "# x y w h interpolation size hflip expected (src.png; resized_crop, hflip)", lines)

    lines = []
    for k, (rw, rh, interp, top, left, size) in enumerate(RKR):
        fn = "rkr%02d_%s.rgba" % (k, interp)
        img = TF.resize(src, [rh, rw], TV_INTERP[interp])
        save(fn, crop_or_pad(img, top, left, size, size, padding_mode="reflect"))
        lines.append("%d %d %s %d %d %d %s" % (rw, rh, interp, top, left, size, fn))
    manifest("rkr.txt", "# rw rh interpolation top left size expected (src.png; resize, crop_or_pad reflect)",
             lines)


if __name__ == "__main__":
    main()
