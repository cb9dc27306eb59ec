#!/usr/bin/env python3
"""Regenerate tests/data/transforms/: inputs and expected outputs for tests/test_transforms.c.

Every expected output is made by the real code ctimm reproduces: timm's auto_augment.py ops
(through timm's own AugmentOp, magnitude std 0, prob 1, the random sign and GaussianBlurRand's
uniform draw pinned), AugMixAugment's mixing (its _apply_basic / _apply_blended with fixed
weights and op chains), torchvision 0.14's functional_pil colour adjustments, gaussian_blur,
rgb_to_grayscale and resized_crop, and timm's transforms_imagenet_eval.
Images are PPM (P6) so the C test reads them without a decoder; the transform inputs are PNG and
JPEG because those go through image_decode.

Usage (Debian's PIL 9.4 / torchvision 0.14 belong to /usr/bin/python3):
    PYTHONPATH=/opt/timm /usr/bin/python3 tools/make_transform_fixtures.py [--out tests/data/transforms]
"""

import argparse
import math
import os
import random

import numpy as np
import PIL
from PIL import Image
import torchvision
import torchvision.transforms.functional as TF
from torchvision.transforms import InterpolationMode

import timm
from timm.data import auto_augment as aa
from timm.data.transforms import RandomResizedCropAndInterpolation, ResizeKeepRatio, CenterCropOrPad, crop_or_pad
from timm.data.transforms_factory import transforms_imagenet_eval

PIL_INTERP = {'nearest': Image.NEAREST, 'bilinear': Image.BILINEAR, 'bicubic': Image.BICUBIC}
TV_INTERP = {'nearest': InterpolationMode.NEAREST, 'bilinear': InterpolationMode.BILINEAR,
             'bicubic': InterpolationMode.BICUBIC}
IMG_MEAN = tuple(min(255, round(255 * x)) for x in (0.485, 0.456, 0.406))  # timm's img_mean


def synthetic(w, h, seed, noise=6.0):
    """A photo-like test card: smooth colour fields, edges, saturated disks, a little noise."""
    rng = np.random.RandomState(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    u, v = x / w, y / h
    r = 128 + 90 * np.sin(2 * math.pi * (1.3 * u + 0.4 * v)) + 30 * v
    g = 110 + 80 * np.cos(2 * math.pi * (0.7 * u - 1.1 * v)) - 20 * u
    b = 90 + 100 * u * v + 40 * np.sin(6 * math.pi * v)
    img = np.stack([r, g, b], -1)
    for cx, cy, rad, col in ((0.3, 0.35, 0.18, (250, 30, 20)), (0.72, 0.6, 0.2, (20, 200, 60)),
                             (0.55, 0.2, 0.1, (40, 40, 230)), (0.15, 0.8, 0.12, (250, 250, 240))):
        m = (u - cx) ** 2 + ((v - cy) * h / w) ** 2 < rad ** 2
        img[m] = col
    img[:, int(0.85 * w):int(0.9 * w)] *= 0.25  # a dark bar: a hard vertical edge
    img += rng.normal(0, noise, img.shape)
    return Image.fromarray(np.clip(img, 0, 255).round().astype(np.uint8), 'RGB')


def save_ppm(path, img):
    img = img.convert('RGB')
    with open(path, 'wb') as f:
        f.write(b'P6\n%d %d\n255\n' % img.size)
        f.write(np.asarray(img, dtype=np.uint8).tobytes())


# (op, magnitude, negate, interpolation) for one AugmentOp call each.
OP_CASES = [
    ('AutoContrast', 0, 0, 'bilinear'), ('Equalize', 0, 0, 'bilinear'), ('Invert', 0, 0, 'bilinear'),
    ('Rotate', 9, 0, 'nearest'), ('Rotate', 9, 0, 'bilinear'), ('Rotate', 9, 0, 'bicubic'),
    ('Rotate', 3, 1, 'bilinear'), ('Rotate', 6.3, 1, 'bicubic'), ('Rotate', 0, 0, 'bilinear'),
    ('Posterize', 3, 0, 'bilinear'), ('Posterize', 9, 0, 'bilinear'),
    ('PosterizeIncreasing', 2, 0, 'bilinear'), ('PosterizeIncreasing', 10, 0, 'bilinear'),
    ('PosterizeOriginal', 5, 0, 'bilinear'), ('Posterize', 6.3, 0, 'bilinear'),
    ('Solarize', 5, 0, 'bilinear'), ('Solarize', 9, 0, 'bilinear'), ('SolarizeIncreasing', 3, 0, 'bilinear'),
    ('SolarizeAdd', 4, 0, 'bilinear'), ('SolarizeAdd', 9, 0, 'bilinear'),
    ('Color', 2, 0, 'bilinear'), ('Color', 9, 0, 'bilinear'), ('ColorIncreasing', 7, 1, 'bilinear'),
    ('Contrast', 2, 0, 'bilinear'), ('Contrast', 9, 0, 'bilinear'), ('ContrastIncreasing', 7, 0, 'bilinear'),
    ('Brightness', 2, 0, 'bilinear'), ('Brightness', 9, 0, 'bilinear'),
    ('BrightnessIncreasing', 7, 1, 'bilinear'),
    ('Sharpness', 2, 0, 'bilinear'), ('Sharpness', 9, 0, 'bilinear'), ('SharpnessIncreasing', 7, 1, 'bilinear'),
    ('ShearX', 9, 0, 'nearest'), ('ShearX', 9, 0, 'bilinear'), ('ShearX', 9, 0, 'bicubic'),
    ('ShearY', 5, 1, 'bilinear'), ('ShearY', 5, 1, 'bicubic'),
    ('TranslateXRel', 9, 1, 'nearest'), ('TranslateXRel', 9, 1, 'bilinear'), ('TranslateXRel', 9, 1, 'bicubic'),
    ('TranslateYRel', 4, 0, 'bicubic'), ('TranslateYRel', 7.5, 1, 'nearest'),
    # on a low-contrast input, where the histogram ops have work to do
    ('AutoContrast', 0, 0, 'bilinear', 'src_low.ppm'), ('Equalize', 0, 0, 'bilinear', 'src_low.ppm'),
    ('Contrast', 9, 0, 'bilinear', 'src_low.ppm'),
    # the '3a' ops; GaussianBlurRand with random.uniform's draw pinned to u
    ('Desaturate', 10, 0, 'bilinear'), ('Desaturate', 4, 0, 'bilinear'),
    ('GaussianBlur', 10, 0, 'bilinear'), ('GaussianBlur', 2.5, 0, 'bilinear'), ('GaussianBlur', 0, 0, 'bilinear'),
    ('GaussianBlurRand', 10, 0, 'bilinear', 'src.ppm', 0.8), ('GaussianBlurRand', 10, 0, 'bilinear', 'src.ppm', 0.3),
    ('GaussianBlurRand', 6, 0, 'bilinear', 'src.ppm', 0.55),
    # AugMix's translate_pct
    ('TranslateXRel', 9, 1, 'bilinear', 'src.ppm', 0, 0.3), ('TranslateYRel', 6, 0, 'bicubic', 'src.ppm', 0, 0.3),
]

# AugMixAugment at fixed draws: (blended, magnitude, negate, m, mixing weights, op chains)
AUGMIX_CASES = [
    (0, 3, 0, 0.7, (0.2, 0.5, 0.3), (('Rotate', 'Equalize'), ('PosterizeIncreasing',), ('ShearX', 'ColorIncreasing', 'AutoContrast'))),
    (0, 9, 1, 0.33, (0.61, 0.39), (('TranslateXRel', 'SolarizeIncreasing'), ('SharpnessIncreasing', 'ContrastIncreasing'))),
    (0, 5, 0, 0.95, (0.05, 0.15, 0.3, 0.5), (('BrightnessIncreasing',), ('ShearY',), ('TranslateYRel',), ('Equalize', 'Rotate'))),
    (1, 3, 0, 0.7, (0.2, 0.5, 0.3), (('Rotate', 'Equalize'), ('PosterizeIncreasing',), ('ShearX', 'ColorIncreasing', 'AutoContrast'))),
    (1, 8, 1, 0.4, (0.45, 0.1, 0.45), (('TranslateXRel',), ('SolarizeIncreasing', 'AutoContrast'), ('Rotate',))),
]

# torchvision.transforms.functional (PIL backend) at fixed factors: what ColorJitter applies;
# gaussian_blur (kernel 23) at fixed sigmas and rgb_to_grayscale(img, 3): what --gaussian-blur-prob
# and --grayscale-prob apply.
COLOR_CASES = [('brightness', 0.6), ('brightness', 1.37), ('contrast', 0.65), ('contrast', 1.4),
               ('saturation', 0.0), ('saturation', 1.33), ('hue', -0.3), ('hue', 0.12), ('hue', 0.5),
               ('hflip', 0), ('vflip', 0), ('gaussian_blur', 0.1), ('gaussian_blur', 0.83), ('gaussian_blur', 2.0),
               ('grayscale', 0)]

# timm's eval transform: (crop_mode, interpolation, img_size, crop_pct)
EVAL_CASES = [(m, i, 32, 0.875) for m in ('center', 'squash', 'border')
              for i in ('nearest', 'bilinear', 'bicubic')]
EVAL_CASES += [('center', 'bicubic', 32, 1.0), ('border', 'bilinear', 32, 0.95), ('center', 'bilinear', 40, 1.25)]

# torchvision resized_crop (RandomResizedCropAndInterpolation's output) with a fixed box:
# (top, left, height, width, interpolation, size)
RRC_CASES = [(5, 9, 30, 41, 'bilinear', 32), (5, 9, 30, 41, 'bicubic', 32), (5, 9, 30, 41, 'nearest', 32),
             (0, 0, 45, 61, 'bilinear', 24), (20, 30, 12, 10, 'bicubic', 16)]


# train_crop_mode rkrc / rkrr at a fixed resize (rh, rw) and, for rkrr, a fixed offset:
# ResizeKeepRatio's F.resize, then CenterCropOrPad / crop_or_pad with reflect padding.
# (mode, rh, rw, top, left, interpolation, size)
RKR_CASES = [('rkrc', 38, 51, 0, 0, 'bilinear', 32), ('rkrc', 30, 40, 0, 0, 'bicubic', 32),
             ('rkrc', 33, 29, 0, 0, 'bilinear', 32), ('rkrr', 36, 48, 3, 11, 'bicubic', 32),
             ('rkrr', 30, 45, -2, 7, 'bilinear', 32), ('rkrr', 29, 31, -3, -1, 'nearest', 32)]

# Parameter draws compared by their statistics over 20000 draws of timm's own get_params (Python's
# random, seeded): ('rrc', w, h, size, scale, ratio) -> mean and std of the box's area fraction and
# log aspect; ('rkr', ...) -> mean and std of the resized height and width.
SAMPLING_CASES = [('rrc', 500, 375, 224, (0.08, 1.0), (3 / 4, 4 / 3)), ('rrc', 90, 300, 64, (0.35, 1.0), (0.5, 2.0)),
                  ('rkr', 500, 375, 224, (0.08, 1.0), (3 / 4, 4 / 3)), ('rkr', 300, 90, 64, (0.8, 1.0), (0.9, 1 / 0.9))]


def fmt(x):
    return repr(float(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', default=os.path.join(os.path.dirname(__file__), '..', 'tests', 'data', 'transforms'))
    args = ap.parse_args()
    out = args.out
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        os.remove(os.path.join(out, f))

    src = synthetic(32, 24, 1)
    save_ppm(os.path.join(out, 'src.ppm'), src)
    low = np.asarray(src).astype(np.float64) * np.array([0.35, 0.5, 0.2]) + np.array([70, 40, 120])
    inputs = {'src.ppm': src, 'src_low.ppm': Image.fromarray(low.round().astype(np.uint8), 'RGB')}
    save_ppm(os.path.join(out, 'src_low.ppm'), inputs['src_low.ppm'])

    lines = []
    uniform = aa.random.uniform
    for k, case in enumerate(OP_CASES):
        name, mag, neg, interp = case[:4]
        input_name, u, pct = (tuple(case[4:]) + ('src.ppm', 0.0, 0.45)[len(case) - 4:])[:3]
        aa._randomly_negate = (lambda v: -v) if neg else (lambda v: v)
        aa.random.uniform = lambda a, b: a + (b - a) * u
        hp = dict(translate_const=int(32 * 0.45), img_mean=IMG_MEAN, interpolation=PIL_INTERP[interp],
                  translate_pct=pct)
        op = aa.AugmentOp(name, prob=1.0, magnitude=mag, hparams=hp)
        res = op(inputs[input_name])
        aa.random.uniform = uniform
        fn = 'op%02d_%s.ppm' % (k, name)
        save_ppm(os.path.join(out, fn), res)
        lines.append('%s %s %d %s %s %s %s %s' % (name, fmt(mag), neg, interp, fn, input_name, fmt(u), fmt(pct)))
    with open(os.path.join(out, 'ops.txt'), 'w') as f:
        f.write('# op magnitude negate interpolation expected input u translate_pct (fill %d %d %d)\n' % IMG_MEAN)
        f.write('\n'.join(lines) + '\n')

    lines = []
    choice = np.random.choice
    for k, (blended, mag, neg, m, ws, chains) in enumerate(AUGMIX_CASES):
        aa._randomly_negate = (lambda v: -v) if neg else (lambda v: v)
        hp = dict(translate_const=int(32 * 0.45), img_mean=IMG_MEAN, interpolation=Image.BILINEAR,
                  translate_pct=0.3, magnitude_std=0)
        ops = aa.augmix_ops(magnitude=mag, hparams=hp)
        by_name = {op.name: op for op in ops}
        todo = [[by_name[n] for n in c] for c in chains]
        np.random.choice = lambda _ops, depth, replace: todo.pop(0)
        am = aa.AugMixAugment(ops, alpha=1., width=len(ws), depth=-1, blended=bool(blended))
        ws32, m32 = np.float32(ws), np.float32(m)
        res = am._apply_blended(src, ws32, m32) if blended else am._apply_basic(src, ws32, m32)
        np.random.choice = choice
        fn = 'augmix%02d.ppm' % k
        save_ppm(os.path.join(out, fn), res)
        lines.append('%d %s %d %s %d %s %s %s' % (blended, fmt(mag), neg, fmt(m32), len(ws),
                                                  ' '.join(fmt(w) for w in ws32), ' '.join('+'.join(c) for c in chains),
                                                  fn))
    with open(os.path.join(out, 'augmix.txt'), 'w') as f:
        f.write('# blended magnitude negate m width weights... chains... expected (input src.ppm, bilinear, '
                'translate_pct 0.3, fill %d %d %d)\n' % IMG_MEAN)
        f.write('\n'.join(lines) + '\n')

    lines = []
    for k, (name, factor) in enumerate(COLOR_CASES):
        fn = {'brightness': TF.adjust_brightness, 'contrast': TF.adjust_contrast,
              'saturation': TF.adjust_saturation, 'hue': TF.adjust_hue}
        if name == 'gaussian_blur':
            res = TF.gaussian_blur(src, [23, 23], [factor, factor])
        elif name == 'grayscale':
            res = TF.rgb_to_grayscale(src, num_output_channels=3)
        elif name == 'hflip':
            res = TF.hflip(src)
        elif name == 'vflip':
            res = TF.vflip(src)
        else:
            res = fn[name](src, factor)
        f_name = 'color%02d_%s.ppm' % (k, name)
        save_ppm(os.path.join(out, f_name), res)
        lines.append('%s %s %s' % (name, fmt(factor), f_name))
    with open(os.path.join(out, 'color.txt'), 'w') as f:
        f.write('# adjustment factor expected (input src.ppm; torchvision.transforms.functional on PIL)\n')
        f.write('\n'.join(lines) + '\n')

    eval_src = synthetic(61, 45, 2)
    eval_src.save(os.path.join(out, 'eval_src.png'))
    lines = []
    for k, (mode, interp, size, pct) in enumerate(EVAL_CASES):
        tf = transforms_imagenet_eval(size, crop_pct=pct, crop_mode=mode, interpolation=interp,
                                      use_prefetcher=True)
        res = np.asarray(tf(eval_src)).transpose(1, 2, 0)  # MaybePILToTensor gives CHW uint8
        fn = 'eval%02d_%s_%s.ppm' % (k, mode, interp)
        save_ppm(os.path.join(out, fn), Image.fromarray(np.ascontiguousarray(res)))
        lines.append('%s %s %d %s %s' % (mode, interp, size, fmt(pct), fn))
    with open(os.path.join(out, 'eval.txt'), 'w') as f:
        f.write('# crop_mode interpolation img_size crop_pct expected (input eval_src.png; mean imagenet)\n')
        f.write('\n'.join(lines) + '\n')

    lines = []
    for k, (top, left, h, w, interp, size) in enumerate(RRC_CASES):
        res = TF.resized_crop(eval_src, top, left, h, w, [size, size], TV_INTERP[interp])
        fn = 'rrc%02d_%s.ppm' % (k, interp)
        save_ppm(os.path.join(out, fn), res)
        lines.append('%d %d %d %d %s %d %s' % (left, top, w, h, interp, size, fn))
    with open(os.path.join(out, 'rrc.txt'), 'w') as f:
        f.write('# x y w h interpolation size expected (input eval_src.png; torchvision resized_crop)\n')
        f.write('\n'.join(lines) + '\n')

    lines = []
    for k, (mode, rh, rw, top, left, interp, size) in enumerate(RKR_CASES):
        img = TF.resize(eval_src, [rh, rw], TV_INTERP[interp])
        if mode == 'rkrc':
            res = CenterCropOrPad(size, padding_mode='reflect')(img)
        else:
            res = crop_or_pad(img, top, left, size, size, padding_mode='reflect')
        fn = 'rkr%02d_%s.ppm' % (k, mode)
        save_ppm(os.path.join(out, fn), res)
        lines.append('%s %d %d %d %d %s %d %s' % (mode, rh, rw, top, left, interp, size, fn))
    with open(os.path.join(out, 'rkr.txt'), 'w') as f:
        f.write('# mode rh rw top left interpolation size expected (input eval_src.png resized to rw x rh)\n')
        f.write('\n'.join(lines) + '\n')

    random.seed(0)
    lines = []
    for mode, w, h, size, scale, ratio in SAMPLING_CASES:
        img = Image.new('RGB', (w, h))
        a, b = [], []
        for _ in range(20000):
            if mode == 'rrc':
                top, left, bh, bw = RandomResizedCropAndInterpolation.get_params(img, scale, ratio)
                a.append(bw * bh / (w * h))
                b.append(math.log(bw / bh))
            else:
                rh, rw = ResizeKeepRatio.get_params(img, (size, size), 0., 0.5, scale, True, 0.5, ratio)
                a.append(rh)
                b.append(rw)
        lines.append('%s %d %d %d %s %s %s %s %s %s %s %s' % (
            mode, w, h, size, fmt(scale[0]), fmt(scale[1]), fmt(ratio[0]), fmt(ratio[1]),
            fmt(np.mean(a)), fmt(np.std(a)), fmt(np.mean(b)), fmt(np.std(b))))
    with open(os.path.join(out, 'sampling.txt'), 'w') as f:
        f.write('# mode w h size scale0 scale1 ratio0 ratio1 mean_a std_a mean_b std_b (rrc: a = area fraction, '
                'b = log aspect; rkr: a = resized height, b = resized width; timm, 20000 draws)\n')
        f.write('\n'.join(lines) + '\n')

    # A larger JPEG for the scaled-decode path (DCT downscaling), compared to the full decode in C.
    synthetic(320, 240, 3, noise=2.0).save(os.path.join(out, 'photo.jpg'), quality=90)

    with open(os.path.join(out, 'VERSIONS'), 'w') as f:
        f.write('PIL %s\ntorchvision %s\ntimm %s\nnumpy %s\n' % (
            PIL.__version__, torchvision.__version__, timm.__version__, np.__version__))


if __name__ == '__main__':
    main()
