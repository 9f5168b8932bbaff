"""AdapterFusion (Pfeiffer et al., EACL 2021) on top of a Transformer encoder.

Each layer holds several task adapters (Houlsby bottleneck); a fusion module
attends over the adapter outputs. We keep a running count of which adapter
wins the attention for analysis of adapter usage.
"""
from collections import Counter
from typing import Dict, List

import torch
import torch.nn as nn
import torch.nn.functional as F


class BottleneckAdapter(nn.Module):
    def __init__(self, d_model: int, reduction: int = 8):
        super().__init__()
        self.down = nn.Linear(d_model, d_model // reduction)
        self.up = nn.Linear(d_model // reduction, d_model)
        nn.init.normal_(self.up.weight, std=1e-2)
        nn.init.zeros_(self.up.bias)

    def forward(self, x):
        return x + self.up(F.relu(self.down(x)))


class AdapterFusion(nn.Module):
    def __init__(self, d_model: int, temperature: float = 1.0):
        super().__init__()
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model, bias=False)
        nn.init.eye_(self.value.weight)
        self.temperature = temperature

    def forward(self, residual, adapter_outputs):
        # adapter_outputs: (B, T, N, D)
        q = self.query(residual).unsqueeze(2)
        k = self.key(adapter_outputs)
        scores = (q * k).sum(-1) / self.temperature
        probs = scores.softmax(-1)
        v = self.value(adapter_outputs)
        return (probs.unsqueeze(-1) * v).sum(2), probs


class FusedEncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, adapter_names: List[str]):
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
        self.ln1 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Linear(2 * d_model, d_model))
        self.ln2 = nn.LayerNorm(d_model)
        self.adapter_names = list(adapter_names)
        self.adapters = nn.ModuleDict({n: BottleneckAdapter(d_model) for n in adapter_names})
        self.fusion = AdapterFusion(d_model)

    def forward(self, x, key_padding_mask=None):
        a, _ = self.attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        x = self.ln1(x + a)
        h = self.ff(x)
        stacked = torch.stack([self.adapters[n](h) for n in self.adapter_names], dim=2)
        fused, probs = self.fusion(h, stacked)
        return self.ln2(x + fused), probs


class AdapterFusionClassifier(nn.Module):
    def __init__(self, vocab=600, d_model=48, n_heads=4, n_layers=2, n_classes=3,
                 adapter_names=("sst2", "mnli", "qqp")):
        super().__init__()
        self.emb = nn.Embedding(vocab, d_model, padding_idx=0)
        self.pos = nn.Parameter(torch.randn(64, d_model) * 0.02)
        self.layers = nn.ModuleList([FusedEncoderLayer(d_model, n_heads, adapter_names) for _ in range(n_layers)])
        self.classifier = nn.Linear(d_model, n_classes)
        self.adapter_names = list(adapter_names)
        self.adapter_usage: Dict[int, Counter] = {i: Counter() for i in range(n_layers)}

    def forward(self, input_ids):
        pad = input_ids == 0
        x = self.emb(input_ids) + self.pos[: input_ids.size(1)]
        for i, layer in enumerate(self.layers):
            x, probs = layer(x, key_padding_mask=pad)
            winners = probs[~pad].argmax(-1).tolist()
            self.adapter_usage[i].update(self.adapter_names[w] for w in winners)
        cls = x[:, 0]
        return self.classifier(cls)


def build():
    torch.manual_seed(0)
    model = AdapterFusionClassifier().eval()
    ids = torch.randint(1, 600, (3, 14))
    ids[2, 10:] = 0
    return model, (ids,)
