#!/usr/bin/python3
"""Writes the tar fixtures of tests/test_dataset.c and tests/test_loader.c.

tree.tar  (pax format): text members whose bytes are their own path, in
          class folders with natural-order names, a path longer than 100
          characters (pax 'path' record), folders, non-image files,
          upper-case extensions, and a member tar (inner.tar, ustar format,
          with a path split into prefix + name) whose members' folder is
          'inner' (so classes 'inner', 'sub', 'class2').
gnu.tar   (GNU format): the same idea with a GNU long-name ('L') member.
photos.tar: six 16x16 images (JPEG and PNG) in two classes and one
          truncated JPEG, for the loader's skip path through a tar.

Deterministic (fixed mtime, uid, names). Run from anywhere:
  /usr/bin/python3 tests/data/loader/make_fixtures.py
Then print timm's view (the expectations hard-coded in the tests) with
  PYTHONPATH=/opt/timm /usr/bin/python3 tests/data/loader/make_fixtures.py --show
"""
import io
import os
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))


def add_bytes(tf, name, data, typ=tarfile.REGTYPE):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = 1700000000
    ti.mode = 0o644
    ti.type = typ
    tf.addfile(ti, io.BytesIO(data))


def add_dir(tf, name):
    ti = tarfile.TarInfo(name)
    ti.type = tarfile.DIRTYPE
    ti.mtime = 1700000000
    ti.mode = 0o755
    tf.addfile(ti)


def text_tar(fmt, members, inner=None):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode='w', format=fmt) as tf:
        for m in members:
            if m.endswith('/'):
                add_dir(tf, m.rstrip('/'))
            else:
                add_bytes(tf, m, m.encode())
        if inner is not None:
            add_bytes(tf, 'inner.tar', inner)
    return buf.getvalue()


LONG = 'class10/' + 'l' * 120 + '.png'
PREFIXED = 'p' * 90 + '/class2/' + 'q' * 60 + '.jpg'  # > 100 chars, splits into ustar prefix + name

TREE = [
    'class2/', 'class2/img10.jpg', 'class2/img9.JPG', 'class2/.hidden.jpg', 'class2/.jpg',
    'class10/', 'class10/a.jpeg', LONG, './Class1/z.Png', 'class2/notes.txt', 'top.jpg',
    'class3/nested/n.jpg',
]
INNER = ['x.jpg', 'sub/y.png', 'readme.md', PREFIXED]
GNU = ['b/1.jpg', 'a/' + 'g' * 150 + '.jpg', 'a/2.jpg']


def photos_tar():
    from PIL import Image
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode='w', format=tarfile.USTAR_FORMAT) as tf:
        for i in range(6):
            cls = 'cat' if i % 2 == 0 else 'dog'
            im = Image.new('RGB', (16, 16), (40 * i, 255 - 30 * i, 128))
            for x in range(16):
                im.putpixel((x, x), (255, 255, 255))
            b = io.BytesIO()
            ext = 'png' if i == 3 else 'jpg'
            im.save(b, 'PNG' if ext == 'png' else 'JPEG', quality=90)
            add_bytes(tf, f'{cls}/{i}.{ext}', b.getvalue())
            if i == 1:
                add_bytes(tf, 'cat/1bad.jpg', jpeg_truncated())
    return buf.getvalue()


def jpeg_truncated():
    from PIL import Image
    b = io.BytesIO()
    Image.new('RGB', (16, 16), (9, 9, 9)).save(b, 'JPEG', quality=90)
    return b.getvalue()[:100]


def write():
    inner = text_tar(tarfile.USTAR_FORMAT, INNER)
    files = {
        'tree.tar': text_tar(tarfile.PAX_FORMAT, TREE, inner),
        'gnu.tar': text_tar(tarfile.GNU_FORMAT, GNU),
        'photos.tar': photos_tar(),
    }
    for name, data in files.items():
        with open(os.path.join(HERE, name), 'wb') as f:
            f.write(data)
        print(name, len(data), 'bytes')


def show():
    from timm.data.readers.reader_image_in_tar import ReaderImageInTar
    for name in ['tree.tar', 'gnu.tar', 'photos.tar']:
        r = ReaderImageInTar(os.path.join(HERE, name))
        print(name, 'classes', sorted(r.class_name_to_idx.items(), key=lambda kv: kv[1]))
        for i in range(len(r)):
            f, t = r[i]
            data = f.read()
            print(f'  {r.samples[i][0].path!r} {t} {len(data)}')


if __name__ == '__main__':
    show() if '--show' in sys.argv else write()
