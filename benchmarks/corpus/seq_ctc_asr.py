"""Transformer-CTC acoustic model (conv subsampling + encoder + CTC head).

Roughly follows the ESPnet / speechbrain layout: two stride-2 conv layers
reduce the frame rate by 4, a small Transformer encoder, then a linear CTC
projection. Returns log-probs, output lengths and the CTC loss.
"""
import math
from typing import Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


class Conv2dSubsampling(nn.Module):
    """Conv2d subsampling (to 1/4 length)."""

    def __init__(self, idim: int, odim: int):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(1, odim, 3, 2),
            nn.ReLU(),
            nn.Conv2d(odim, odim, 3, 2),
            nn.ReLU(),
        )
        self.out = nn.Linear(odim * (((idim - 1) // 2 - 1) // 2), odim)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        x = self.conv(x.unsqueeze(1))  # (B, C, T', F')
        b, c, t, f = x.size()
        x = self.out(x.transpose(1, 2).contiguous().view(b, t, c * f))
        lengths = ((lengths - 1) // 2 - 1) // 2
        return x, lengths


class PositionalEncoding(nn.Module):
    def __init__(self, d_model: int, max_len: int = 2000):
        super().__init__()
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float32).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))
        self.xscale = math.sqrt(d_model)

    def forward(self, x):
        return x * self.xscale + self.pe[:, : x.size(1)]


def make_pad_mask(lengths: torch.Tensor) -> torch.Tensor:
    """True at padded positions."""
    max_len = int(lengths.max())
    seq_range = torch.arange(max_len, device=lengths.device)
    return seq_range.unsqueeze(0) >= lengths.unsqueeze(1)


class CTCModel(nn.Module):
    def __init__(self, idim=40, adim=64, heads=4, units=128, layers=2, vocab=32, blank=0):
        super().__init__()
        self.blank = blank
        self.subsample = Conv2dSubsampling(idim, adim)
        self.pos = PositionalEncoding(adim)
        enc_layer = nn.TransformerEncoderLayer(adim, heads, units, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(enc_layer, layers, enable_nested_tensor=False)
        self.after_norm = nn.LayerNorm(adim)
        self.ctc_lo = nn.Linear(adim, vocab)

    def forward(self, feats, feat_lens, ys_pad, ys_lens):
        x, hlens = self.subsample(feats, feat_lens)
        x = self.pos(x)
        pad_mask = make_pad_mask(hlens)
        x = x[:, : pad_mask.size(1)]
        x = self.encoder(x, src_key_padding_mask=pad_mask)
        x = self.after_norm(x)
        log_probs = self.ctc_lo(x).log_softmax(-1)
        loss = F.ctc_loss(
            log_probs.transpose(0, 1),
            ys_pad,
            hlens,
            ys_lens,
            blank=self.blank,
            reduction="sum",
            zero_infinity=True,
        ) / log_probs.size(0)
        return log_probs, hlens, loss


def build():
    torch.manual_seed(0)
    model = CTCModel().eval()
    feats = torch.randn(2, 64, 40)
    feat_lens = torch.tensor([64, 52])
    ys_pad = torch.randint(1, 32, (2, 6))
    ys_lens = torch.tensor([6, 4])
    return model, (feats, feat_lens, ys_pad, ys_lens)
