"""Learned Step Size Quantization (Esser et al., ICLR 2020) for a small Transformer FFN/attention.

Weights and activations are fake-quantised with learnable step sizes. The
step size is initialised from the first batch it sees (2 * mean|x| / sqrt(Qp)),
following the reference implementation.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def grad_scale(x, scale):
    y_out = x
    y_grad = x * scale
    return (y_out - y_grad).detach() + y_grad


def round_pass(x):
    return (x.round() - x).detach() + x


class LsqQuantizer(nn.Module):
    def __init__(self, bits: int = 8, all_positive: bool = False, per_channel: bool = False):
        super().__init__()
        if all_positive:
            self.Qn, self.Qp = 0, 2 ** bits - 1
        else:
            self.Qn, self.Qp = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        self.per_channel = per_channel
        self.s = nn.Parameter(torch.ones(1))
        self.register_buffer("init_state", torch.zeros(1))

    def forward(self, x):
        if self.init_state == 0:
            init = 2 * x.detach().abs().mean() / math.sqrt(self.Qp)
            self.s.data.copy_(init.reshape(1))
            self.init_state.fill_(1)
        g = 1.0 / math.sqrt(x.numel() * self.Qp)
        s = grad_scale(self.s, g)
        x = torch.clamp(x / s, self.Qn, self.Qp)
        return round_pass(x) * s


class QuantLinear(nn.Linear):
    def __init__(self, in_features, out_features, bias=True, w_bits=4, a_bits=8, act_positive=False):
        super().__init__(in_features, out_features, bias)
        self.w_quant = LsqQuantizer(w_bits)
        self.a_quant = LsqQuantizer(a_bits, all_positive=act_positive)

    def forward(self, x):
        return F.linear(self.a_quant(x), self.w_quant(self.weight), self.bias)


class QuantFFN(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.fc1 = QuantLinear(d, d_ff)
        self.fc2 = QuantLinear(d_ff, d, act_positive=True)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class QuantEncoderLayer(nn.Module):
    def __init__(self, d=32, heads=4, d_ff=64):
        super().__init__()
        self.heads = heads
        self.qkv = QuantLinear(d, 3 * d)
        self.proj = QuantLinear(d, d)
        self.ln1 = nn.LayerNorm(d)
        self.ffn = QuantFFN(d, d_ff)
        self.ln2 = nn.LayerNorm(d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.heads, C // self.heads).unbind(2)
        att = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(C // self.heads)
        y = torch.einsum("bhts,bshd->bthd", att.softmax(-1), v).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.ffn(self.ln2(x))


class QuantTextClassifier(nn.Module):
    def __init__(self, vocab=500, d=32, layers=2, n_classes=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.layers = nn.Sequential(*[QuantEncoderLayer(d) for _ in range(layers)])
        self.head = nn.Linear(d, n_classes)

    def forward(self, ids):
        return self.head(self.layers(self.emb(ids)).mean(1))


def build():
    torch.manual_seed(0)
    model = QuantTextClassifier().eval()
    ids = torch.randint(0, 500, (2, 12))
    # calibration pass so step sizes are initialised before evaluation
    with torch.no_grad():
        model(ids)
    return model, (ids,)
