"""What timm's eager training step keeps for its backward, on the CPU: an
estimate of the peak device memory benchmark.py's training step reaches
(torch.cuda.max_memory_allocated), for issue 22's memory column before a
device measures it. Against session 21's lease (an H200, the same five
models at batch 256 bf16) it came to 96-98% of the measured peaks of the
convolutional nets and 98-101% of the ViTs'.

Autograd's saved tensors (saved_tensors_hooks, each storage once, the
parameters apart) of a forward and loss under bf16 autocast, channels-last,
at two small batches; the part that grows with the batch taken to `--batch`,
plus the parameters and SGD's momentum buffers, all f32. Not counted: the
gradients (they grow while the saved tensors go), the step's temporaries,
cuDNN's workspace and the caching allocator's rounding; what the CPU's
autocast keeps where CUDA's would keep another dtype counts as the CPU's. layer_norm runs in f32, as CUDA's autocast runs it (the CPU's
does not take its f32 weight with a bf16 input); attention keeps what the
device's fused kernels keep (FusedAttention).

  PYTHONPATH=/opt/timm /usr/bin/python3 bench/eager_saved_memory.py resnet50 [--img-size 224] [--batch 256]
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class FusedAttention(torch.autograd.Function):
    """What the device's fused attention keeps for its backward: q, k, v, the
    output and each row's logsumexp. timm takes it where torch has
    scaled_dot_product_attention (>= 2.0); Debian's 1.13 has none, and timm's
    own path there keeps the N x N weights twice, which the device never does."""

    @staticmethod
    def forward(ctx, q, k, v):
        s = (q.float() @ k.float().transpose(-2, -1)) * q.shape[-1] ** -0.5
        out = (torch.softmax(s, -1) @ v.float()).to(q.dtype)
        ctx.save_for_backward(q, k, v, out, torch.logsumexp(s, -1))
        return out


def fused_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    assert attn_mask is None and not is_causal and scale is None
    return FusedAttention.apply(q, k, v)


if not hasattr(F, "scaled_dot_product_attention"):  # before timm reads whether it is there
    F.scaled_dot_product_attention = fused_attention
import timm  # noqa: E402

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
          f"{(saved + 2 * params) / mib:.0f} MiB, eager's peak estimated")


if __name__ == "__main__":
    main()
