#!/usr/bin/env python3
"""WebDataset shards and what timm's ReaderWds makes of them (tests/test_wds.c).

Writes tests/data/wds/: four shards train-00000{0..3}.tar of tiny images and
.cls labels laid out to exercise webdataset's grouping (a key in a folder,
members of a key in either order, an upper-case extension, keys with both
.jpg and .png in either order, a key with dots, an orphan label, an image
without a label, a __meta__ member, a .cls with spaces), a shard jval-000000.tar labelled
through .json (the split's alt_label, a '/' path, a -1 that drops the
sample), _info.json naming both splits, and expected.json: what timm 1.0.31's
ReaderWds yields, read through torch's DataLoader as train.py does:

  samples: [key, label, image extension] of single-rank evaluation with one
           worker (the dataset's order: shards in turn, samples in order)
  orders:  the key sequence of one rank's epoch for evaluation configs
           (ranks, rank, workers, batch, split): no shuffling, so it is
           timm's exact order; distributed ones are cut or repeated to
           timm's per-worker count (with_epoch)
  lengths: len() of the reader (timm's epoch length) for training configs
  keyed:   [key, label, image extension] of the train split with input_key
           'png;jpg' (png preferred), of jval with target_key 'z'
  mapped:  [key, label] of the train split read with class map map.pkl (a
           dict of label numbers to indices; a label it lacked would stop
           the run with a KeyError, outside the pipeline's error handler)

Each image is a flat colour whose red channel is the sample's id, so the
decoded image tells which member timm read.

Regenerate (webdataset 0.2.x and braceexpand from PyPI, e.g. pip install
--target /tmp/wdspkg --no-deps webdataset==0.2.100 braceexpand):

  PYTHONPATH=/tmp/wdspkg:/opt/timm python3 tools/make_wds_fixture.py tests/data/wds
"""
import io
import json
import os
import pickle
import sys
import tarfile

import torch
from PIL import Image

from timm.data.dataset import IterableImageDataset


def image(sample_id, fmt):
    b = io.BytesIO()
    Image.new('RGB', (8, 8), (sample_id * 8, 40, 200)).save(b, format=fmt, **({'quality': 95} if fmt == 'JPEG' else {}))
    return b.getvalue()


def write_tar(path, members):
    with tarfile.open(path, 'w', format=tarfile.USTAR_FORMAT) as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            t.addfile(info, io.BytesIO(data))


def main(out):
    os.makedirs(out, exist_ok=True)
    ids = {}

    def img(key, fmt='PNG'):
        ids.setdefault(key, len(ids) + 1)
        return image(ids[key], fmt)

    cls = lambda n: str(n).encode()
    shards = [
        [('k00.cls', cls(3)), ('k00.png', img('k00')), ('k01.png', img('k01')), ('k01.cls', cls(1)),
         ('dir/k02.cls', cls(4)), ('dir/k02.png', img('dir/k02')), ('k03.cls', cls(2)),
         ('k04.PNG', img('k04')), ('k04.cls', cls(0))],
        [('k10.png', img('k10')), ('k10.cls', cls(5)), ('k10.json', b'{"x": 1}'), ('k11.png', img('k11')),
         ('k12.png', img('k12-png')), ('k12.jpg', img('k12', 'JPEG')), ('k12.cls', cls(6)),
         ('k13.cls', b'  7\n'), ('k13.png', img('k13')),
         ('k14.jpg', img('k14', 'JPEG')), ('k14.png', img('k14-png')), ('k14.cls', cls(2))],
        [('__meta__.json', b'{}'), ('k20.cls', cls(1)), ('k20.png', img('k20')), ('k21.cls', cls(2)),
         ('k21.png', img('k21')), ('k22.seg.png', img('k22-seg')), ('k22.cls', cls(3)), ('k23.cls', cls(4)),
         ('k23.png', img('k23'))],
        [('k30.cls', cls(5)), ('k30.png', img('k30')), ('k31.cls', cls(6)), ('k31.png', img('k31')),
         ('k32.cls', cls(7)), ('k32.png', img('k32'))],
    ]
    names = []
    for s, members in enumerate(shards):
        names.append(f'train-{s:06d}.tar')
        write_tar(os.path.join(out, names[-1]), members)
    write_tar(os.path.join(out, 'jval-000000.tar'), [
        ('v0.json', b'{"meta": {"y": 3}, "z": 1}'), ('v0.png', img('v0')),
        ('v1.json', b'{"meta": {"y": -1}, "z": 4}'), ('v1.png', img('v1')),
        ('v2.png', img('v2')), ('v2.json', b'{"meta": {"y": 8}, "z": -1}'),
    ])
    info = {'name': 'fixture', 'splits': {
        'train': {'name': 'train', 'num_samples': 14, 'filenames': names, 'shard_lengths': [4, 4, 3, 3]},
        'jval': {'name': 'jval', 'num_samples': 2, 'filenames': ['jval-000000.tar'], 'shard_lengths': [2],
                 'alt_label': 'meta/y'},
    }}
    with open(os.path.join(out, '_info.json'), 'w') as f:
        json.dump(info, f, indent=1)
    by_id = {v: k for k, v in ids.items()}

    def key_of(img):
        return by_id[round(img.getpixel((0, 0))[0] / 8)]

    def listing(split, input_key=None, target_key=None):
        # [key, label, the image's extension]: 'k12-png' is k12's png, the other k12/k14 image its jpg
        rows = []
        for name, label in read(split, False, 1, 0, 0, 1, input_key=input_key, target_key=target_key):
            key = name[:-4] if name.endswith('-png') else name
            rows.append([key, label, 'jpg' if name in ('k12', 'k14') else 'png'])
        return rows

    with open(os.path.join(out, 'map.pkl'), 'wb') as f:
        pickle.dump({label: 7 - label for label in range(8)}, f, protocol=4)

    def read(split, training, world, rank, workers, batch, class_map=None, input_key=None, target_key=None):
        kw = {k: v for k, v in (('input_key', input_key), ('target_key', target_key)) if v}
        ds = IterableImageDataset(out, reader='wds/fixture', split=split, is_training=training, batch_size=batch,
                                  seed=0, class_map=class_map, **kw)
        ds.reader.dist_num_replicas, ds.reader.dist_rank = world, rank
        ds.set_loader_cfg(num_workers=workers)
        if training:
            return len(ds)
        loader = torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers,
                                             collate_fn=lambda b: b)
        return [(key_of(im), int(t)) for b in loader for im, t in b]

    samples = [[split] + row for split in ('train', 'jval') for row in listing(split)]
    keyed = {'train png;jpg': listing('train', input_key='png;jpg'), 'jval target z': listing('jval', target_key='z')}
    orders = []
    for world, workers, batch in ((1, 3, 2), (2, 2, 3), (2, 1, 4), (3, 1, 2)):
        for rank in range(world):
            keys = [k for k, _ in read('train', False, world, rank, workers, batch)]
            orders.append({'world': world, 'rank': rank, 'workers': workers, 'batch': batch, 'keys': keys})
    lengths = []
    for world, workers, batch in ((1, 1, 4), (2, 1, 3), (2, 2, 2), (1, 3, 5)):
        lengths.append({'world': world, 'workers': workers, 'batch': batch,
                        'len': read('train', True, world, 0, workers, batch)})
    mapped = [[k, t] for k, t in read('train', False, 1, 0, 0, 1, os.path.join(out, 'map.pkl'))]
    with open(os.path.join(out, 'expected.json'), 'w') as f:
        json.dump({'samples': samples, 'orders': orders, 'lengths': lengths, 'mapped': mapped, 'keyed': keyed}, f,
                  indent=1)
        f.write('\n')


if __name__ == '__main__':
    main(sys.argv[1] if len(sys.argv) > 1 else 'tests/data/wds')
