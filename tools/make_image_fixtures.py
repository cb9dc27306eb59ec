#!/usr/bin/python3
"""Writes tests/data/images/: small JPEG/PNG fixtures, what Pillow decodes them
to, what Pillow's Image.resize makes of a source image, and broken files.

Run with Debian's Pillow (the expectations were made with Pillow 9.4.0 over
libjpeg-turbo 2.1.5, the same libjpeg-turbo ctimm's TurboJPEG wraps):
    /usr/bin/python3 tools/make_image_fixtures.py

Outputs (all tiny; test_image.c reads the two manifests):
  <name>.jpg / <name>.png           inputs
  <name>.<shrink>.rgb               Image.open(f).convert('RGB').tobytes(), for
                                    shrink > 1 after im.draft('RGB', ...)
  decode.txt                        "<input> <shrink> <w> <h> <expected.rgb>"
  resize_<i>.rgb, resize.txt        "<i> <filter> <x0> <y0> <x1> <y1> <w> <h>"
                                    on resize_src.png
  bad_*                             inputs every decoder must refuse (Pillow
                                    refuses them too; checked below)
and tests/fuzz/corpus/: the inputs above plus a few mutants, fuzz_decode's seeds.
"""
import io
import os
import struct
import sys
import zlib

import numpy as np
from PIL import Image

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "data", "images")
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")


def pattern(w, h, seed):
    """RGB uint8 [h, w, 3]: gradients, a hard-edged checkerboard (overshoot
    for bicubic), and noise, so resampling errors cannot hide."""
    rng = np.random.RandomState(seed)
    y, x = np.mgrid[0:h, 0:w]
    r = (x * 255 // max(w - 1, 1))
    g = (y * 255 // max(h - 1, 1))
    b = np.where(((x // 3) + (y // 3)) % 2 == 0, 235, 20)
    img = np.stack([r, g, b], -1).astype(np.int32) + rng.randint(-20, 21, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


# --- a PNG writer for what Pillow cannot save (Adam7, 16-bit RGB, 2-bit...) --

def png_chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)


def pack_row(samples, depth):
    if depth == 16:
        return b"".join(struct.pack(">H", s) for s in samples)
    if depth == 8:
        return bytes(samples)
    out, acc, nbits = bytearray(), 0, 0
    for s in samples:
        acc = (acc << depth) | s
        nbits += depth
        if nbits == 8:
            out.append(acc)
            acc, nbits = 0, 0
    if nbits:
        out.append(acc << (8 - nbits))
    return bytes(out)


def filter_rows(rows, bpp):
    """Cycles through all five PNG filter types so the decoder unfilters each."""
    out, prev = bytearray(), None
    for i, row in enumerate(rows):
        ft = i % 5
        out.append(ft)
        for j, v in enumerate(row):
            a = row[j - bpp] if j >= bpp else 0
            b = prev[j] if prev is not None else 0
            c = prev[j - bpp] if prev is not None and j >= bpp else 0
            if ft == 0:
                p = 0
            elif ft == 1:
                p = a
            elif ft == 2:
                p = b
            elif ft == 3:
                p = (a + b) // 2
            else:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                p = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            out.append((v - p) & 255)
        prev = row
    return bytes(out)


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def write_png(samples, depth, ctype, interlace=False, plte=None, trns=None, extra=b"", idat_parts=1, bad_idat_crc=False):
    """samples: int array [h, w, channels]; `extra`: chunks put before IDAT;
    the image data split over `idat_parts` IDAT chunks, the first with a
    wrong CRC if `bad_idat_crc` (Pillow never checks those)."""
    h, w, ch = samples.shape
    bpp = max(1, ch * depth // 8)
    if interlace:
        data = b""
        for x0, y0, dx, dy in ADAM7:
            sub = samples[y0::dy, x0::dx]
            if sub.shape[0] and sub.shape[1]:
                data += filter_rows([pack_row(r.reshape(-1).tolist(), depth) for r in sub], bpp)
    else:
        data = filter_rows([pack_row(r.reshape(-1).tolist(), depth) for r in samples], bpp)
    png = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, int(interlace)))
    png += extra
    if plte is not None:
        png += png_chunk(b"PLTE", bytes(plte))
    if trns is not None:
        png += png_chunk(b"tRNS", bytes(trns))
    z = zlib.compress(data, 9)
    step = -(-len(z) // idat_parts)
    for i in range(0, len(z), step):
        c = png_chunk(b"IDAT", z[i:i + step])
        if bad_idat_crc and i == 0:
            c = c[:-4] + bytes(b ^ 0x5A for b in c[-4:])
        png += c
    return png + png_chunk(b"IEND", b"")


# --- fixtures ----------------------------------------------------------------

def save(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def pil_bytes(im, fmt, **kw):
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))
    W, H = 37, 23
    rgb = Image.fromarray(pattern(W, H, 0), "RGB")
    # The PNG variants are smaller: many of them, and PNG decoding is the
    # same code at any size.
    W, H = 21, 13
    base = pattern(W, H, 5)
    rng = np.random.RandomState(1)

    inputs = {}
    # JPEG: 4:2:0 (fancy upsampling matters), 4:4:4, greyscale, CMYK (Adobe,
    # inverted: Pillow reads it as CMYK;I), progressive, and a larger one for
    # the DCT-domain downscales.
    inputs["rgb.jpg"] = pil_bytes(rgb, "JPEG", quality=90)
    inputs["rgb444.jpg"] = pil_bytes(rgb, "JPEG", quality=90, subsampling=0)
    inputs["grey.jpg"] = pil_bytes(rgb.convert("L"), "JPEG", quality=90)
    inputs["cmyk.jpg"] = pil_bytes(rgb.convert("CMYK"), "JPEG", quality=90)
    inputs["prog.jpg"] = pil_bytes(rgb, "JPEG", quality=90, progressive=True)
    inputs["big.jpg"] = pil_bytes(Image.fromarray(pattern(64, 48, 2), "RGB"), "JPEG", quality=85)
    # PNG through Pillow's writer.
    inputs["rgb.png"] = pil_bytes(Image.fromarray(base, "RGB"), "PNG")
    alpha = rng.randint(0, 256, (H, W, 1)).astype(np.uint8)
    inputs["rgba.png"] = pil_bytes(Image.fromarray(np.concatenate([base, alpha], -1), "RGBA"), "PNG")
    inputs["la.png"] = pil_bytes(Image.fromarray(np.concatenate([base[..., :1], alpha], -1), "LA"), "PNG")
    inputs["pal8.png"] = pil_bytes(rgb.quantize(200), "PNG")
    inputs["pal4.png"] = pil_bytes(Image.fromarray(base, "RGB").quantize(16), "PNG", bits=4)
    # Pillow reads 16-bit grey as mode I and convert('RGB') clips it at 255,
    # so keep most values small enough to be visible.
    g16 = (rng.randint(0, 400, (H, W)) * np.where(rng.rand(H, W) < 0.9, 1, 150)).astype(np.uint16)
    inputs["grey16.png"] = pil_bytes(Image.fromarray(g16, "I;16"), "PNG")
    # PNG through the writer above.
    inputs["rgb_adam7.png"] = write_png(base.astype(np.int32), 8, 2, interlace=True)
    s16 = rng.randint(0, 65536, (H, W, 4))
    inputs["rgb16.png"] = write_png(s16[..., :3], 16, 2)
    inputs["rgba16_adam7.png"] = write_png(s16, 16, 6, interlace=True)
    inputs["la16.png"] = write_png(s16[..., :2], 16, 4)
    inputs["grey2_adam7.png"] = write_png(rng.randint(0, 4, (H, W, 1)), 2, 0, interlace=True)
    inputs["grey1.png"] = write_png(rng.randint(0, 2, (H, W, 1)), 1, 0)
    inputs["grey4_trns.png"] = write_png(rng.randint(0, 16, (H, W, 1)), 4, 0, trns=[0, 5])
    inputs["rgb_trns.png"] = write_png(base.astype(np.int32), 8, 2, trns=[0, 10, 0, 20, 0, 30])
    # 2-bit palette with 3 entries and tRNS; index 3 is past the palette and
    # Pillow maps it through its default greyscale ramp (3 -> (3, 3, 3)).
    inputs["pal2_short_adam7.png"] = write_png(rng.randint(0, 4, (H, W, 1)), 2, 3, interlace=True,
                                              plte=[200, 10, 10, 10, 200, 10, 10, 10, 200], trns=[0, 128])
    # Ancillary chunks Pillow and ctimm ignore (gamma, text, an ICC profile),
    # the image data over three IDATs, the first one's CRC wrong.
    extra = (png_chunk(b"gAMA", struct.pack(">I", 45455)) + png_chunk(b"tEXt", b"Comment\0ctimm")
             + png_chunk(b"zTXt", b"Title\0\0" + zlib.compress(b"fixture"))
             + png_chunk(b"iCCP", b"icc\0\0" + zlib.compress(b"\0" * 128)))
    inputs["chunks_badidatcrc.png"] = write_png(base.astype(np.int32), 8, 2, extra=extra, idat_parts=3,
                                                bad_idat_crc=True)
    # Corrupt but complete JPEGs Pillow decodes (it ignores libjpeg's
    # warnings): stray bytes before EOI; an Adobe transform flag turned to 2,
    # so libjpeg reads the CMYK data as YCCK.
    j = inputs["rgb.jpg"]
    inputs["warn_extraneous.jpg"] = j[:-2] + b"\x00\x11\x22\x33\x44" + j[-2:]
    c = bytearray(inputs["cmyk.jpg"])
    adobe = c.index(b"Adobe")
    assert c[adobe + 11] == 0, "expected a CMYK (transform 0) Adobe marker"
    c[adobe + 11] = 2
    inputs["ycck.jpg"] = bytes(c)
    # Luma sampled 3x1: no subsampling type TurboJPEG 2.1's header call
    # knows, yet libjpeg (and Pillow) decode it (here with a warning, the
    # scan data being that of the 4:4:4 file).
    c = bytearray(inputs["rgb444.jpg"])
    sof = c.index(b"\xff\xc0")
    assert c[sof + 11] == 0x11
    c[sof + 11] = 0x31
    inputs["samp31_warn.jpg"] = bytes(c)
    inputs["pal1.png"] = write_png(rng.randint(0, 2, (H, W, 1)), 1, 3, plte=[0, 0, 255, 255, 255, 0])

    manifest = []
    for name, data in inputs.items():
        save(name, data)
        im = Image.open(io.BytesIO(data))
        out = im.convert("RGB")
        save(name + ".1.rgb", out.tobytes())
        manifest.append(f"{name} 1 {out.size[0]} {out.size[1]} {name}.1.rgb")
        if name.endswith(".jpg"):
            for s in (2, 4, 8):
                im = Image.open(io.BytesIO(data))
                w, h = im.size
                im.draft("RGB", (w // s, h // s))
                out = im.convert("RGB")
                assert out.size == ((w + s - 1) // s, (h + s - 1) // s), (name, s, out.size)
                save(f"{name}.{s}.rgb", out.tobytes())
                manifest.append(f"{name} {s} {out.size[0]} {out.size[1]} {name}.{s}.rgb")
    save("decode.txt", ("\n".join(manifest) + "\n").encode())

    # Resize: a source with hard edges, up- and downscales, non-integer boxes
    # (Pillow rounds box coordinates to float32), a pure integer crop, a
    # 1x1 output, a zero-width box, and a crop-sized integer box.
    src = Image.fromarray(pattern(41, 31, 3), "RGB")
    save("resize_src.png", pil_bytes(src, "PNG"))
    filters = {"nearest": Image.NEAREST, "bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}
    cases = [
        ((0, 0, 41, 31), 12, 9),        # ~3.4x down
        ((0, 0, 41, 31), 50, 37),       # up
        ((0, 0, 41, 31), 41, 31),       # identity (Pillow copies)
        ((0, 0, 41, 31), 41, 12),       # vertical only
        ((0, 0, 41, 31), 17, 31),       # horizontal only
        ((3.3, 2.7, 35.9, 27.2), 16, 16),
        ((0.5, 0.25, 40.7, 30.1), 41, 31),
        ((10.1, 5.9, 17.3, 9.4), 23, 15),  # small box, big upscale
        ((1 / 3, 2 / 3, 39 + 1 / 7, 29.05), 13, 9),
        ((5, 7, 30, 27), 25, 20),       # integer box of output size: a crop
        ((5, 7, 30, 27), 11, 20),
        ((0, 0, 41, 31), 1, 1),
        ((12, 3, 12, 25), 4, 6),        # zero-width box (Pillow allows it)
        ((0, 0, 41, 31), 5, 50),        # down in x, up in y
        ((7.77, 0, 41, 31), 24, 24),
    ]
    lines, i = [], 0
    for fname, flt in filters.items():
        for box, w, h in cases:
            out = src.resize((w, h), flt, box=box)
            save(f"resize_{i}.rgb", out.tobytes())
            lines.append(f"{i} {fname} {box[0]!r} {box[1]!r} {box[2]!r} {box[3]!r} {w} {h}")
            i += 1
    save("resize.txt", ("\n".join(lines) + "\n").encode())

    # Broken inputs; Pillow refuses each of them as well.
    jpg, png = inputs["rgb.jpg"], inputs["rgb.png"]
    bad = {}
    bad["bad_trunc.jpg"] = jpg[: len(jpg) * 2 // 3]
    bad["bad_trunc_prog.jpg"] = inputs["prog.jpg"][: len(inputs["prog.jpg"]) // 2]
    bad["bad_trunc.png"] = png[: len(png) - 40]
    bad["bad_garbage.bin"] = bytes(np.random.RandomState(4).randint(0, 256, 300).astype(np.uint8))
    bad["bad_header_only.jpg"] = jpg[:2]
    crc = bytearray(png)
    crc[29] ^= 0xFF  # IHDR's CRC (8 signature + 4 length + 4 type + 13 data)
    bad["bad_crc.png"] = bytes(crc)
    sof = jpg.index(b"\xff\xc0")
    bad["bad_huge.jpg"] = jpg[: sof + 5] + struct.pack(">HH", 40000, 40000) + jpg[sof + 9:]
    bad["bad_huge.png"] = (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0))
                           + png[33:])
    for name, data in bad.items():
        save(name, data)
        try:
            Image.open(io.BytesIO(data)).convert("RGB")
        except Exception as e:  # noqa: BLE001 -- any refusal is what we want
            continue
        sys.exit(f"Pillow decoded {name}: it is not a broken input")

    total = sum(os.path.getsize(os.path.join(OUT, f)) for f in os.listdir(OUT))
    print(f"{len(os.listdir(OUT))} files, {total} bytes in {OUT}")
    write_corpus({**inputs, **bad})


def write_corpus(files):
    """Fuzz seeds: every input, and mutants that reach rarer paths."""
    os.makedirs(CORPUS, exist_ok=True)
    for f in os.listdir(CORPUS):
        if f.startswith("seed_"):
            os.remove(os.path.join(CORPUS, f))
    seeds = dict(files)
    jpg = files["rgb.jpg"]
    sof = jpg.index(b"\xff\xc0")
    seeds["mut_1x1.jpg"] = jpg[: sof + 5] + struct.pack(">HH", 1, 1) + jpg[sof + 9:]
    seeds["mut_2000x9.jpg"] = jpg[: sof + 5] + struct.pack(">HH", 9, 2000) + jpg[sof + 9:]
    dht = jpg.index(b"\xff\xc4")
    seeds["mut_dht.jpg"] = jpg[: dht + 6] + b"\xff" + jpg[dht + 7:]
    png = files["rgb.png"]
    seeds["mut_short_ihdr.png"] = png[:16] + png[16:24] + png[33:]
    pal = files["pal4.png"]
    plte = pal.index(b"PLTE")
    seeds["mut_empty_plte.png"] = pal[: plte - 4] + png_chunk(b"PLTE", b"") + pal[plte + 4 + struct.unpack(">I", pal[plte - 4:plte])[0] + 4:]
    seeds["mut_1x1.png"] = write_png(np.zeros((1, 1, 3), np.int32), 8, 2, interlace=True)
    for name, data in seeds.items():
        with open(os.path.join(CORPUS, "seed_" + name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
