#!/usr/bin/env python3
"""Write the PyTorch checkpoint test files of tests/data/torch/ with the real torch and timm.

    PYTHONPATH=/opt/timm /usr/bin/python3 tools/make_torch_ckpt.py [--out tests/data/torch]

What it writes (each a few KB; tests/test_torch_file.c reads them, the fuzz target
fuzz_torch_file takes the folder as its seeds, the CLI test torch_checkpoint_cli loads the
test_resnet one):
  - dtypes.pth, dtypes_legacy.pth, dtypes_legacy_p4.pth: one bare state_dict (an OrderedDict
    with _metadata, as module.state_dict() makes it) of every dtype ctimm reads, a transposed,
    a permuted 4-d, an offset, an expanded (stride 0), a 0-d and an empty tensor, two tensors
    sharing one storage, 'module.' / '_orig_mod.' prefixed names; in torch.save's zip format,
    its legacy format, and the legacy format at pickle protocol 4.
  - dtypes_zip64.pth: dtypes.pth with zip64's directory records (as archives over 4 GiB have them).
  - train.pth.tar: a timm train.py checkpoint (CheckpointSaver's dict: epoch, arch, optimizer,
    version, args as an argparse.Namespace, amp_scaler, state_dict and state_dict_ema with
    'module.' prefixes, metric, saver).
  - test_resnet_views.pth.tar: the same kind of checkpoint of timm's test_resnet whose every
    tensor is a strided, overlapping view into a few small storages (so the whole model takes
    ~30 KB), its EMA other views of them.
  - resume_sgd.pth.tar, resume_adamw.pth.tar: resumable train.py checkpoints of test_resnet with
    10 classes (tests/test_resume_torch.c and the CLI test train_resume_torch resume them): the
    optimizer made by timm's create_optimizer_v2 ('sgd', weight decay 2e-5, so two param groups;
    'adamw', weight decay 0.05) and stepped twice on a random batch, saved as CheckpointSaver
    saves (version 2, epoch 2 and 1); every tensor then swapped for a view of a small storage as
    above (optimizer slots too, each its own content), so each file takes ~30 KB. The sgd one has
    train.py's args and a model EMA; the adamw one an amp_scaler, no EMA and no args (so its arch
    is the model's class name, 'resnet', as CheckpointSaver writes it without args).
  - model_key.pth: DeiT's layout ('model', 'model_ema'); dup_names.pth, not_state_dict.pth,
    state_dict_list.pth: dicts that are neither a state_dict nor a checkpoint of one.
  - untyped_v3.pth: written by hand (torch >= 2's form, which torch 1.13 cannot write):
    tensors rebuilt by _rebuild_tensor_v3 from torch.UntypedStorage and torch.storage.UntypedStorage
    with a dtype global, and a _rebuild_parameter, in a zip whose folder is not "archive".
  - hostile and broken files: a pickle calling os.system through __reduce__ (zip and legacy),
    INST and unknown opcodes, memo abuse, MARKs nested 100 deep, a tensor beyond its storage,
    a view expanded past the allocation limit, an int16 tensor, a compressed zip, a missing
    storage, a bad CRC, truncated zip and legacy files, a TorchScript archive.
  - expected.txt: what each file must give, one line each:
        FILE sd|ema NAME DTYPE SHAPE CRC32   a tensor in order (SHAPE like 2x3, '-' for 0-d; the
                                             CRC-32 of its contiguous little-endian bytes)
        FILE meta KEY VALUE...               a metadata string
        FILE refuse TEXT...                  the file is refused with TEXT in the message
  - resume_expected.txt: what resuming each resumable file must give:
        FILE optim NAME DTYPE SHAPE CRC32    an optimizer-state tensor under its ctimm name,
                                             optim.<param>.<slot>
        FILE step N                          optim.step (every param's 'step'), '-' for none
        FILE epoch E                         the last epoch done: 'epoch', less one but for version 2
        FILE scaler S GF BF GI GT            the amp_scaler's five numbers, '-' for none
"""

import argparse
import collections
import io
import os
import pickle
import struct
import sys
import zipfile
import zlib

import torch

CT_DTYPE = {torch.float32: 'F32', torch.float64: 'F64', torch.float16: 'F16', torch.bfloat16: 'BF16',
            torch.int64: 'I64', torch.int32: 'I32', torch.uint8: 'U8', torch.bool: 'U8'}


def crc_of(t):
    """CRC-32 of a tensor's contiguous bytes, as ctimm holds them (bool as one byte)."""
    flat = t.detach().contiguous().reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.to(torch.uint8)
    return zlib.crc32(flat.view(torch.uint8).numpy().tobytes()) if flat.numel() else 0


def clean(name):
    for p in ('_orig_mod.', 'module.', '_orig_mod.'):
        if name.startswith(p):
            name = name[len(p):]
    return name


class Expect:
    def __init__(self):
        self.lines = []

    def tensors(self, file, part, sd):
        for k, v in sd.items():
            shape = 'x'.join(str(s) for s in v.shape) or '-'
            self.lines.append(f'{file} {part} {clean(k)} {CT_DTYPE[v.dtype]} {shape} {crc_of(v):08x}')

    def checkpoint_meta(self, file, ckpt):
        """The metadata ctimm keeps of a checkpoint dict: its plain values and args' fields, as str() prints them."""
        for k, v in ckpt.items():
            if k == 'args':
                for f, a in vars(v).items():
                    if plain(a):
                        self.lines.append(f'{file} meta args.{f} {a}')
            elif plain(v):
                self.lines.append(f'{file} meta {k} {v}')

    def refuse(self, file, text):
        self.lines.append(f'{file} refuse {text}')


def plain(v, depth=0):
    """A value ctimm renders into metadata: scalars, and containers of them nested at most 4 deep, short."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return len(str(v)) < 2048
    if isinstance(v, (list, tuple, dict)) and depth < 4:
        items = [x for kv in v.items() for x in kv] if isinstance(v, dict) else list(v)
        return all(plain(x, depth + 1) for x in items) and len(str(v)) < 2048
    return False


def gen(seed):
    return torch.Generator().manual_seed(seed)


def dtypes_state_dict():
    g = gen(1)
    sd = collections.OrderedDict()
    sd['f32'] = torch.randn(2, 3, generator=g)
    sd['f64'] = torch.randn(3, generator=g, dtype=torch.float64)
    sd['f16'] = torch.randn(4, generator=g).half()
    sd['bf16'] = torch.randn(2, 2, generator=g).bfloat16()
    sd['i64'] = torch.tensor([-2, -1, 0, 1, 2 ** 40])
    sd['i32'] = torch.tensor([-7, 0, 2 ** 31 - 1], dtype=torch.int32)
    sd['u8'] = torch.tensor([0, 255, 7], dtype=torch.uint8)
    sd['bool'] = torch.tensor([True, False, True])
    sd['transposed'] = torch.randn(3, 4, generator=g).t()
    sd['permuted'] = torch.randn(2, 3, 4, 5, generator=g).permute(2, 0, 3, 1)
    sd['offset'] = torch.randn(8, generator=g)[2:5]
    sd['expanded'] = torch.randn(3, generator=g).expand(4, 3)
    sd['scalar'] = torch.tensor(3.5)
    sd['empty'] = torch.zeros(0, 3)
    base = torch.randn(6, generator=g)
    sd['module.shared_a'] = base
    sd['_orig_mod.module.shared_b'] = base.view(2, 3)[1]
    sd._metadata = collections.OrderedDict({'': {'version': 1}})
    return sd


class Evil:
    """What a hostile checkpoint holds: unpickling it would run a shell command."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f'touch {self.marker}',))


def write_handmade(path, obj, storages, folder='archive', patch=None):
    """torch.save's zip layout written by hand: obj pickled with storages as persistent ids.

    storages: {key: (storage class global, bytes, element count)}; obj's Storage values name them.
    patch: edits the pickle's bytes (without a memo, every global is written where it is used).
    """
    buf = io.BytesIO()
    p = pickle.Pickler(buf, protocol=2)
    p.fast = patch is not None

    def persistent_id(o):
        if isinstance(o, Storage):
            cls, _, numel = storages[o.key]
            return ('storage', cls, o.key, 'cpu', numel)
        return None

    p.persistent_id = persistent_id
    p.dump(obj)
    with zipfile.ZipFile(path, 'w', zipfile.ZIP_STORED) as z:
        z.writestr(f'{folder}/data.pkl', patch(buf.getvalue()) if patch else buf.getvalue())
        for key, (_, data, _) in storages.items():
            z.writestr(f'{folder}/data/{key}', data)
        z.writestr(f'{folder}/version', '3\n')


class Storage:
    def __init__(self, key):
        self.key = key


class Rebuild:
    """A tensor as torch pickles it: fn(storage, offset, size, stride, ...)."""

    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


def legacy_bytes(main_pickle, storages=()):
    """torch.save's legacy format around a main pickle written by hand: storages are (key, count, bytes)."""
    out = pickle.dumps(0x1950a86a20f9469cfc6c, protocol=2) + pickle.dumps(1001, protocol=2)
    out += pickle.dumps({'protocol_version': 1001, 'little_endian': True,
                         'type_sizes': {'short': 2, 'int': 4, 'long': 4}}, protocol=2)
    out += main_pickle + pickle.dumps([k for k, _, _ in storages], protocol=2)
    for _, count, data in storages:
        out += struct.pack('<q', count) + data
    return out


def other_layouts(out, exp):
    """DeiT's layout ('model', 'model_ema'), and dicts that are neither checkpoint nor state_dict."""
    g = gen(5)
    sd = collections.OrderedDict(w=torch.randn(2, 2, generator=g), b=torch.randn(2, generator=g))
    ema = collections.OrderedDict((k, v + 1) for k, v in sd.items())
    ckpt = {'model': sd, 'model_ema': ema, 'epoch': 1, 'lr_scheduler': {'last_epoch': 1}}
    torch.save(ckpt, f'{out}/model_key.pth')
    exp.tensors('model_key.pth', 'sd', sd)
    exp.tensors('model_key.pth', 'ema', ema)
    exp.checkpoint_meta('model_key.pth', ckpt)
    torch.save(collections.OrderedDict([('module.w', sd['w']), ('w', sd['b'])]), f'{out}/dup_names.pth')
    exp.refuse('dup_names.pth', "tensor 'w' appears twice (after dropping 'module.' prefixes)")
    torch.save({'epoch': 3, 'w': sd['w']}, f'{out}/not_state_dict.pth')
    exp.refuse('not_state_dict.pth', "its 'epoch' is an int, not a tensor: neither a checkpoint nor a state_dict")
    torch.save({'state_dict': [sd['w']]}, f'{out}/state_dict_list.pth')
    exp.refuse('state_dict_list.pth', "the checkpoint's 'state_dict' is a list, not a state_dict")


def to_zip64(path, out_path):
    """A stored zip rewritten with zip64's records, as an archive over 4 GiB has them: every central
    directory size and offset 0xFFFFFFFF with the values in a zip64 extra field, and the end record's
    fields in a zip64 end record found through its locator."""
    data = open(path, 'rb').read()
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
    body_end = struct.unpack_from('<I', data, data.rfind(b'PK\x05\x06') + 16)[0]  # the old directory's offset
    central = b''
    for i in infos:
        name = i.filename.encode()
        extra = struct.pack('<HHQQQ', 1, 24, i.file_size, i.compress_size, i.header_offset)
        central += struct.pack('<IHHHHHHIIIHHHHHII', 0x02014b50, 45, 45, 0, 0, 0, 0, i.CRC, 0xFFFFFFFF,
                               0xFFFFFFFF, len(name), len(extra), 0, 0, 0, 0, 0xFFFFFFFF) + name + extra
    cd_offset = body_end
    end64_offset = cd_offset + len(central)
    end64 = struct.pack('<IQHHIIQQQQ', 0x06064b50, 44, 45, 45, 0, 0, len(infos), len(infos), len(central), cd_offset)
    locator = struct.pack('<IIQI', 0x07064b50, 0, end64_offset, 1)
    end = struct.pack('<IHHHHIIH', 0x06054b50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    open(out_path, 'wb').write(data[:body_end] + central + end64 + locator + end)
    with zipfile.ZipFile(out_path) as z:  # Python's reader agrees
        assert [(i.filename, i.file_size) for i in z.infolist()] == [(i.filename, i.file_size) for i in infos]


def train_args(model):
    return argparse.Namespace(model=model, lr=0.1, epochs=3, opt='sgd', momentum=0.9, weight_decay=2e-05,
                              decay_milestones=[90, 180, 270], mean=None, input_size=None, img_size=32,
                              amp=False, model_kwargs={}, smoothing=0.1, aa=None, class_map='', device='cuda:0')


def write_train_ckpt(path, model_name, sd, ema, opt_state, epoch, metric):
    """A checkpoint as timm's CheckpointSaver._save writes it (DDP-wrapped names); returns it."""
    ckpt = {
        'epoch': epoch,
        'arch': model_name,
        'optimizer': opt_state,
        'version': 2,
        'args': train_args(model_name),
        'amp_scaler': {'scale': 65536.0, 'growth_factor': 2.0, 'backoff_factor': 0.5, 'growth_interval': 2000,
                       '_growth_tracker': 0},
        'state_dict': collections.OrderedDict(('module.' + k, v) for k, v in sd.items()),
        'state_dict_ema': collections.OrderedDict(('module.' + k, v) for k, v in ema.items()),
        'metric': metric,
        'saver': {'checkpoint_files': [('checkpoint-2.pth.tar', metric)], 'best_epoch': epoch,
                  'best_metric': metric, 'pending': (epoch, metric)},
    }
    torch.save(ckpt, path)
    return ckpt


def small_train(out, exp):
    g = gen(2)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                              torch.nn.Linear(4, 2))
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    net[1].num_batches_tracked.fill_(7)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    net(torch.randn(2, 3, 3, 3, generator=g)).sum().backward()
    opt.step()
    sd = net.state_dict()
    ema = collections.OrderedDict((k, v * 2 if v.is_floating_point() else v + 1) for k, v in sd.items())
    ckpt = write_train_ckpt(f'{out}/train.pth.tar', 'tiny', sd, ema, opt.state_dict(), 3, 45.25)
    exp.tensors('train.pth.tar', 'sd', sd)
    exp.tensors('train.pth.tar', 'ema', ema)
    exp.checkpoint_meta('train.pth.tar', ckpt)


def strided_view(pool, shape, g, offset):
    """A view of pool with this shape: small strides, overlapping, non-contiguous where it can be."""
    shape = list(shape)
    choices = [1, 2, 3, 5, 7]
    stride = [choices[int(torch.randint(0, len(choices), (1,), generator=g))] for _ in shape]

    def extent():
        return sum((s - 1) * st for s, st in zip(shape, stride))

    while offset + extent() >= pool.numel():
        i = max(range(len(stride)), key=lambda j: stride[j] * (shape[j] - 1))
        if stride[i] == 1:
            offset = 0
            continue
        stride[i] = max(1, stride[i] // 2)
    return pool.as_strided(shape, stride, offset)


def resnet_views(out, exp):
    import timm

    model = timm.create_model('test_resnet')
    g = gen(3)
    pool = torch.randn(2048, generator=g) * 0.2
    positive = torch.rand(256, generator=g) + 0.5
    counts = torch.arange(16, dtype=torch.int64) * 10

    def views(shift):
        sd = collections.OrderedDict()
        for k, v in model.state_dict().items():
            off = int(torch.randint(0, 64, (1,), generator=g)) + shift
            if v.dtype == torch.int64:
                sd[k] = counts.as_strided(v.shape, [1] * v.dim(), (off % 16))
            elif k.endswith('running_var'):
                sd[k] = strided_view(positive, v.shape, g, off % 128)
            else:
                sd[k] = strided_view(pool, v.shape, g, off)
        return sd

    sd, ema = views(0), views(7)
    opt_state = {'state': {0: {'momentum_buffer': sd['fc.bias']}}, 'param_groups': [
        {'lr': 0.1, 'momentum': 0.9, 'dampening': 0, 'weight_decay': 2e-05, 'nesterov': False,
         'params': list(range(len(sd)))}]}
    name = 'test_resnet_views.pth.tar'
    ckpt = write_train_ckpt(f'{out}/{name}', 'test_resnet', sd, ema, opt_state, 2, 12.5)
    exp.tensors(name, 'sd', sd)
    exp.tensors(name, 'ema', ema)
    exp.checkpoint_meta(name, ckpt)


OTHER_RESUMABLE = ['sgdw', 'nadam', 'nadamw', 'adamax', 'adopt', 'lamb', 'lion', 'madgrad', 'sgdp', 'adamp', 'adan',
                   'laprop']


def resumable(out, exp, rexp):
    """Resumable train.py checkpoints: a real create_optimizer_v2 optimizer, stepped, as views."""
    import timm
    from timm.optim import create_optimizer_v2

    g = gen(6)
    pool = torch.randn(2048, generator=g) * 0.1
    positive = torch.rand(512, generator=g) + 0.5  # room for every shape's overlapping view
    counts = torch.arange(16, dtype=torch.int64) * 10
    seen = set()

    def view_of(v, k):
        """A view standing for tensor v, the k-th asked for, unlike every other one."""
        if v.dtype == torch.int64:
            return counts.as_strided(v.shape, [1] * v.dim(), k % 16)
        source = positive if v.min() >= 0 else pool
        off = k
        while True:
            w = strided_view(source, v.shape, g, off % (source.numel() // 2))
            if crc_of(w) not in seen or v.numel() <= 1:
                seen.add(crc_of(w))
                return w
            off += 1

    for name, opt_name, wd, epoch, ema, scaler, with_args in [
            ('resume_sgd.pth.tar', 'sgd', 2e-5, 2, True, None, True),
            ('resume_adamw.pth.tar', 'adamw', 0.05, 1, False, 2.0 ** 13, False)] + [
            # every other optimizer whose torch state ctimm reads: its slots under their names
            (f'resume_{o}.pth.tar', o, 0.02, 1, False, None, False) for o in OTHER_RESUMABLE]:
        torch.manual_seed(7)
        model = timm.create_model('test_resnet', num_classes=10)
        opt = create_optimizer_v2(model, opt_name, lr=0.1, weight_decay=wd, momentum=0.9)
        batch, target = torch.randn(4, 3, 32, 32, generator=g), torch.randint(0, 10, (4,), generator=g)
        for _ in range(2):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(batch), target).backward()
            opt.step()
        k = [0]

        def fresh(v):
            k[0] += 1
            return view_of(v, 37 * k[0])

        sd = collections.OrderedDict((n, fresh(v)) for n, v in model.state_dict().items())
        ema_sd = collections.OrderedDict((n, fresh(v)) for n, v in model.state_dict().items()) if ema else None
        opt_state = opt.state_dict()
        names = {id(p): n for n, p in model.named_parameters()}
        step_base = None
        for gi, group in enumerate(opt.param_groups):
            for p, idx in zip(group['params'], opt_state['param_groups'][gi]['params']):
                st = opt_state['state'][idx]
                for slot, v in list(st.items()):
                    if slot == 'step' and not torch.is_tensor(v):  # MADGRAD's: a Python int
                        step_base = v
                    elif slot == 'step':  # every param's step: views of one storage
                        step_base = step_base if step_base is not None else v.reshape(1).clone()
                        st[slot] = step_base.as_strided((), (), 0)
                    elif slot == 'exp_avg_lr_2':  # LaProp's 1 - beta2^step: ctimm derives it
                        continue
                    elif not torch.is_tensor(v):  # LaProp's exp_avg_lr_1, a Python float
                        rexp.append(f'{name} optim optim.{names[id(p)]}.{slot} F32 - '
                                    f'{crc_of(torch.tensor(v, dtype=torch.float32)):08x}')
                    else:
                        st[slot] = fresh(v)
                        # Adan's negated previous gradient is ctimm's pre_grad
                        ours, held = ('pre_grad', -st[slot]) if slot == 'neg_pre_grad' else (slot, st[slot])
                        rexp.append(f'{name} optim optim.{names[id(p)]}.{ours} F32 '
                                    f'{"x".join(str(d) for d in v.shape) or "-"} {crc_of(held):08x}')
        if step_base is None and 'step' in opt_state['param_groups'][0]:  # timm's Lamb: one a group
            step_base = opt_state['param_groups'][0]['step']
        rexp.append(f'{name} step {int(step_base) if step_base is not None else "-"}')
        rexp.append(f'{name} epoch {epoch}')  # version 2: 'epoch' is the last epoch done
        # GradScaler.state_dict() of a run whose scale fell three times and grew 17 steps since
        amp = {'scale': scaler, 'growth_factor': 2.0, 'backoff_factor': 0.5, 'growth_interval': 100,
               '_growth_tracker': 17} if scaler else None
        rexp.append(f'{name} scaler ' + (' '.join(str(v) for v in amp.values()) if amp else '-'))
        ckpt = {'epoch': epoch, 'arch': type(model).__name__.lower(), 'optimizer': opt_state, 'version': 2}
        if with_args:  # CheckpointSaver's arch is then args.model
            ckpt['arch'] = 'test_resnet'
            ckpt['args'] = train_args('test_resnet')
            ckpt['args'].opt, ckpt['args'].weight_decay = opt_name, wd
        if amp:
            ckpt['amp_scaler'] = amp
        ckpt['state_dict'] = sd
        if ema:
            ckpt['state_dict_ema'] = ema_sd
        torch.save(ckpt, f'{out}/{name}')
        exp.tensors(name, 'sd', sd)
        if ema:
            exp.tensors(name, 'ema', ema_sd)
        exp.checkpoint_meta(name, ckpt)


def untyped_v3(out, exp):
    """torch >= 2's _rebuild_tensor_v3 over untyped storages (both spellings of the class)."""
    g = gen(4)
    half = torch.randn(10, generator=g).half()
    ints = torch.tensor([5, -6, 7, -8, 9, -10], dtype=torch.int32)
    hb = half.view(torch.uint8).numpy().tobytes()
    ib = ints.view(torch.uint8).numpy().tobytes()
    storages = {'0': (torch.UntypedStorage, hb, len(hb)), '1': (torch.UntypedStorage, ib, len(ib)),
                '2': (torch.FloatStorage, struct.pack('<4f', 1, 2, 3, 4), 4)}
    v3 = getattr(torch._utils, '_rebuild_tensor_v3', None)
    if v3 is None:  # torch < 2: a stand-in, only so that pickle writes the global's name
        def v3(*args):
            raise NotImplementedError
        v3.__module__, v3.__qualname__, v3.__name__ = 'torch._utils', '_rebuild_tensor_v3', '_rebuild_tensor_v3'
        torch._utils._rebuild_tensor_v3 = v3
    hooks = collections.OrderedDict()
    sd = collections.OrderedDict()
    sd['half_t'] = Rebuild(v3, (Storage('0'), 2, (2, 3), (1, 2), False, hooks, torch.float16))
    sd['ints'] = Rebuild(v3, (Storage('1'), 1, (4,), (1,), False, hooks, torch.int32))
    sd['param'] = Rebuild(torch._utils._rebuild_parameter,
                          (Rebuild(torch._utils._rebuild_tensor_v2, (Storage('2'), 0, (2, 2), (2, 1), True, hooks)),
                           True, hooks))
    # torch.UntypedStorage's class lives in torch.storage; torch names it either way
    write_handmade(f'{out}/untyped_v3.pth', sd, storages, folder='mymodel',
                   patch=lambda b: b.replace(b'ctorch.storage\nUntypedStorage\n', b'ctorch\nUntypedStorage\n', 1))
    want = collections.OrderedDict()
    want['half_t'] = half.as_strided((2, 3), (1, 2), 2)
    want['ints'] = ints[1:5]
    want['param'] = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    exp.tensors('untyped_v3.pth', 'sd', want)


def hostile(out, exp, dtypes_zip, dtypes_legacy):
    marker = '/tmp/ctimm-torch-file-pwned'
    evil = {'state_dict': collections.OrderedDict(w=torch.ones(2)), 'x': Evil(marker)}
    torch.save(evil, f'{out}/evil_reduce.pth')
    exp.refuse('evil_reduce.pth', "global 'posix.system' is not allowed")
    torch.save(evil, f'{out}/evil_reduce_legacy.pth', _use_new_zipfile_serialization=False)
    exp.refuse('evil_reduce_legacy.pth', "global 'posix.system' is not allowed")

    # a hand-written object pickle: (MARK, INST) and an opcode byte pickle does not have
    for name, body, text in [
            ('opcode_inst.pth', b'\x80\x02(X\x04\x00\x00\x00echoiposix\nsystem\n.', 'opcode INST (0x69) is not allowed'),
            ('opcode_unknown.pth', b'\x80\x02}q\x00\xff.', '0xff is not a pickle opcode'),
            ('memo.pth', b'\x80\x02}r\xff\xff\xff\x7f.', 'memo index 2147483647 out of order'),
            ('deep.pth', b'\x80\x02' + b']q\x00(' * 100 + b'e' * 100 + b'.', 'MARKs nested deeper than 64')]:
        with open(f'{out}/{name}', 'wb') as f:
            f.write(legacy_bytes(body))
        exp.refuse(name, text)

    hooks = collections.OrderedDict()
    v2 = torch._utils._rebuild_tensor_v2
    four = {'0': (torch.FloatStorage, struct.pack('<4f', 1, 2, 3, 4), 4)}
    write_handmade(f'{out}/beyond_storage.pth',
                   {'w': Rebuild(v2, (Storage('0'), 0, (100,), (1,), False, hooks))}, four)
    exp.refuse('beyond_storage.pth', "reaches byte 400 of storage '0', which holds 16")
    write_handmade(f'{out}/expand_bomb.pth',
                   {'w': Rebuild(v2, (Storage('0'), 0, (1 << 20, 1 << 10), (0, 0), False, hooks))}, four)
    exp.refuse('expand_bomb.pth', "past 4x the file's size + 64 MiB")
    torch.save({'s': torch.tensor([1, 2], dtype=torch.int16)}, f'{out}/int16.pth')
    exp.refuse('int16.pth', "'s' is torch.int16")

    with zipfile.ZipFile(dtypes_zip) as z, zipfile.ZipFile(f'{out}/compressed.pth', 'w', zipfile.ZIP_DEFLATED) as c:
        for info in z.infolist():
            c.writestr(info.filename, z.read(info.filename))
    exp.refuse('compressed.pth', 'is compressed (method 8, deflate)')
    with zipfile.ZipFile(dtypes_zip) as z, zipfile.ZipFile(f'{out}/missing_storage.pth', 'w') as c:
        for info in z.infolist():
            if not info.filename.endswith('/data/1'):
                c.writestr(info.filename, z.read(info.filename))
    exp.refuse('missing_storage.pth', "storage '1' (zip entry dtypes/data/1) is missing from the archive")

    data = bytearray(open(dtypes_zip, 'rb').read())
    with zipfile.ZipFile(dtypes_zip) as z:
        info = z.getinfo('dtypes/data/0')
    nlen, xlen = struct.unpack_from('<HH', data, info.header_offset + 26)  # the local header's, not the directory's
    at = info.header_offset + 30 + nlen + xlen
    data[at] ^= 1
    open(f'{out}/bad_crc.pth', 'wb').write(data)
    exp.refuse('bad_crc.pth', "zip entry 'dtypes/data/0': CRC-32")
    whole = open(dtypes_zip, 'rb').read()
    open(f'{out}/truncated.pth', 'wb').write(whole[:len(whole) // 2])
    exp.refuse('truncated.pth', 'no zip end-of-directory record')
    whole = open(dtypes_legacy, 'rb').read()
    open(f'{out}/truncated_legacy.pth', 'wb').write(whole[:-5])
    exp.refuse('truncated_legacy.pth', 'runs past the end of the file (truncated?)')

    scripted = torch.jit.script(torch.nn.Linear(1, 1))
    torch.jit.save(scripted, f'{out}/torchscript.pth')
    exp.refuse('torchscript.pth', 'a TorchScript archive')


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--out', default=os.path.join(os.path.dirname(__file__), '..', 'tests', 'data', 'torch'))
    args = ap.parse_args()
    out = args.out
    os.makedirs(out, exist_ok=True)
    exp = Expect()
    sd = dtypes_state_dict()
    # torch names the zip's folder after the file's stem: dtypes/...
    torch.save(sd, f'{out}/dtypes.pth')
    torch.save(sd, f'{out}/dtypes_legacy.pth', _use_new_zipfile_serialization=False)
    torch.save(sd, f'{out}/dtypes_legacy_p4.pth', _use_new_zipfile_serialization=False, pickle_protocol=4)
    to_zip64(f'{out}/dtypes.pth', f'{out}/dtypes_zip64.pth')
    for f in ('dtypes.pth', 'dtypes_zip64.pth', 'dtypes_legacy.pth', 'dtypes_legacy_p4.pth'):
        exp.tensors(f, 'sd', sd)
    small_train(out, exp)
    resnet_views(out, exp)
    rexp = []
    resumable(out, exp, rexp)
    untyped_v3(out, exp)
    other_layouts(out, exp)
    hostile(out, exp, f'{out}/dtypes.pth', f'{out}/dtypes_legacy.pth')
    with open(f'{out}/expected.txt', 'w') as f:
        f.write('# Written by tools/make_torch_ckpt.py: what each file of this folder must give.\n')
        f.write('\n'.join(exp.lines) + '\n')
    with open(f'{out}/resume_expected.txt', 'w') as f:
        f.write('# Written by tools/make_torch_ckpt.py: what resuming each resumable file must give.\n')
        f.write('\n'.join(rexp) + '\n')
    total = sum(os.path.getsize(os.path.join(out, n)) for n in os.listdir(out))
    print(f'wrote {len(os.listdir(out))} files, {total} bytes, to {out}', file=sys.stderr)


if __name__ == '__main__':
    main()
