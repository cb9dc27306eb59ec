"""What timm's eager training step keeps for its backward, on the CPU: a lower
bound of the peak device memory benchmark.py's training step reaches
(torch.cuda.max_memory_allocated), for issue 22's memory column before a
device measures it.

Autograd's saved tensors (saved_tensors_hooks, each storage once, the
parameters apart) of a forward and loss under bf16 autocast, channels-last,
at two small batches; the part that grows with the batch taken to `--batch`,
plus the parameters and SGD's momentum buffers, all f32. Not counted: the
gradients (they grow while the saved tensors go), the step's temporaries,
cuDNN's workspace and the caching allocator's rounding, so the device's peak
is above this. layer_norm runs in f32, as CUDA's autocast runs it (the CPU's
does not take its f32 weight with a bf16 input).

  PYTHONPATH=/opt/timm /usr/bin/python3 bench/eager_saved_memory.py resnet50 [--img-size 224] [--batch 256]
"""
import argparse

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F

_layer_norm = F.layer_norm


def layer_norm_f32(x, shape, weight=None, bias=None, eps=1e-5):
    with torch.autocast("cpu", enabled=False):
        f = lambda t: None if t is None else t.float()
        return _layer_norm(x.float(), shape, f(weight), f(bias), eps)


def saved_bytes(model, batch, img):
    x = torch.randn(batch, 3, img, img).to(memory_format=torch.channels_last)
    target = torch.randint(0, 1000, (batch,))
    params = {p.data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        st = t.storage()
        if st.data_ptr() not in params:
            seen[st.data_ptr()] = max(seen.get(st.data_ptr(), 0), st.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            nn.CrossEntropyLoss()(model(x), target)
    return sum(seen.values())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--img-size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=256)
    a = ap.parse_args()
    torch.set_num_threads(2)
    F.layer_norm = layer_norm_f32
    model = timm.create_model(a.model, pretrained=False).train().to(memory_format=torch.channels_last)
    s2, s4 = saved_bytes(model, 2, a.img_size), saved_bytes(model, 4, a.img_size)
    per = (s4 - s2) / 2
    saved = s2 - 2 * per + per * a.batch
    params = 4 * sum(p.numel() for p in model.parameters())
    mib = 1 << 20
    print(f"{a.model}: {per / 1e6:.2f} MB saved an image, {(s2 - 2 * per) / 1e6:.1f} MB besides; at batch {a.batch}: "
          f"saved {saved / mib:.0f} MiB + parameters {params / mib:.0f} + momentum {params / mib:.0f} = "
          f"{(saved + 2 * params) / mib:.0f} MiB, a lower bound of eager's peak")


if __name__ == "__main__":
    main()
