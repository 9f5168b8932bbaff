"""Weight-only int8 quantisation (per-output-channel, symmetric) for an LM's linears.

Mimics the "W8A16" deployment path: weights are stored as int8 + fp scale and
dequantised on the fly inside forward.
"""
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


def quantize_per_channel(w: torch.Tensor, bits: int = 8):
    qmax = 2 ** (bits - 1) - 1
    scale = w.abs().amax(dim=1, keepdim=True).clamp_min(1e-8) / qmax
    q = torch.clamp(torch.round(w / scale), -qmax - 1, qmax).to(torch.int8)
    return q, scale.squeeze(1)


class W8Linear(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias: Optional[torch.Tensor] = None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.register_buffer("qweight", torch.zeros(out_features, in_features, dtype=torch.int8))
        self.register_buffer("scales", torch.ones(out_features))
        if bias is not None:
            self.register_buffer("bias", bias.detach().clone())
        else:
            self.bias = None

    @classmethod
    def from_float(cls, lin: nn.Linear) -> "W8Linear":
        m = cls(lin.in_features, lin.out_features, lin.bias)
        q, s = quantize_per_channel(lin.weight.detach())
        m.qweight.copy_(q)
        m.scales.copy_(s)
        return m

    def forward(self, x):
        w = self.qweight.to(x.dtype) * self.scales.to(x.dtype)[:, None]
        return F.linear(x, w, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bits=8"


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class DecoderLayer(nn.Module):
    def __init__(self, d, heads, d_ff):
        super().__init__()
        self.heads = heads
        self.norm1 = RMSNorm(d)
        self.wqkv = nn.Linear(d, 3 * d, bias=False)
        self.wo = nn.Linear(d, d, bias=False)
        self.norm2 = RMSNorm(d)
        self.w1 = nn.Linear(d, d_ff, bias=False)
        self.w3 = nn.Linear(d, d_ff, bias=False)
        self.w2 = nn.Linear(d_ff, d, bias=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.wqkv(self.norm1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(y.transpose(1, 2).reshape(B, T, C))
        h = self.norm2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class TinyLlama(nn.Module):
    def __init__(self, vocab=400, d=64, layers=2, heads=4, d_ff=128):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([DecoderLayer(d, heads, d_ff) for _ in range(layers)])
        self.norm = RMSNorm(d)
        self.output = nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        x = self.tok(ids)
        for layer in self.layers:
            x = layer(x)
        return self.output(self.norm(x))


def quantize_model(model: nn.Module, skip=("output",)) -> nn.Module:
    for name, module in list(model.named_modules()):
        for cname, child in list(module.named_children()):
            full = f"{name}.{cname}" if name else cname
            if isinstance(child, nn.Linear) and full not in skip:
                setattr(module, cname, W8Linear.from_float(child))
    return model


def build():
    torch.manual_seed(0)
    model = quantize_model(TinyLlama()).eval()
    ids = torch.randint(0, 400, (2, 16))
    return model, (ids,)
