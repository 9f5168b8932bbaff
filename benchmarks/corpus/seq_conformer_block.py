"""Conformer block (Gulati et al., Interspeech 2020).

FFN/2 -> MHSA -> Conv module -> FFN/2 -> LayerNorm, macaron style, plus a
small stack + CTC-style output layer so it can be used as an encoder.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class FeedForwardModule(nn.Module):
    def __init__(self, d, expansion=4, dropout=0.1):
        super().__init__()
        self.net = nn.Sequential(
            nn.LayerNorm(d),
            nn.Linear(d, d * expansion),
            nn.SiLU(),
            nn.Dropout(dropout),
            nn.Linear(d * expansion, d),
            nn.Dropout(dropout),
        )

    def forward(self, x):
        return self.net(x)


class ConvModule(nn.Module):
    def __init__(self, d, kernel_size=15, dropout=0.1):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.pw1 = nn.Conv1d(d, 2 * d, 1)
        self.dw = nn.Conv1d(d, d, kernel_size, padding=kernel_size // 2, groups=d)
        self.bn = nn.BatchNorm1d(d)
        self.pw2 = nn.Conv1d(d, d, 1)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, pad_mask=None):
        x = self.ln(x).transpose(1, 2)
        x = F.glu(self.pw1(x), dim=1)
        if pad_mask is not None:
            x = x.masked_fill(pad_mask.unsqueeze(1), 0.0)
        x = self.pw2(F.silu(self.bn(self.dw(x))))
        return self.drop(x.transpose(1, 2))


class MHSAModule(nn.Module):
    def __init__(self, d, heads, dropout=0.1):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, dropout=dropout, batch_first=True)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, pad_mask=None):
        h = self.ln(x)
        h, _ = self.attn(h, h, h, key_padding_mask=pad_mask, need_weights=False)
        return self.drop(h)


class ConformerBlock(nn.Module):
    def __init__(self, d=64, heads=4, kernel_size=15, dropout=0.1):
        super().__init__()
        self.ff1 = FeedForwardModule(d, dropout=dropout)
        self.mhsa = MHSAModule(d, heads, dropout)
        self.conv = ConvModule(d, kernel_size, dropout)
        self.ff2 = FeedForwardModule(d, dropout=dropout)
        self.ln_out = nn.LayerNorm(d)

    def forward(self, x, pad_mask=None):
        x = x + 0.5 * self.ff1(x)
        x = x + self.mhsa(x, pad_mask)
        x = x + self.conv(x, pad_mask)
        x = x + 0.5 * self.ff2(x)
        return self.ln_out(x)


class ConformerEncoder(nn.Module):
    def __init__(self, n_mels=40, d=64, layers=2, vocab=30):
        super().__init__()
        self.subsample = nn.Sequential(nn.Conv1d(n_mels, d, 3, stride=2, padding=1), nn.SiLU())
        self.blocks = nn.ModuleList([ConformerBlock(d) for _ in range(layers)])
        self.out = nn.Linear(d, vocab)

    def forward(self, feats, feat_lens):
        x = self.subsample(feats.transpose(1, 2)).transpose(1, 2)
        lens = (feat_lens + 1) // 2
        pad_mask = torch.arange(x.size(1), device=x.device)[None, :] >= lens[:, None]
        for blk in self.blocks:
            x = blk(x, pad_mask)
        return self.out(x).log_softmax(-1), lens


def build():
    torch.manual_seed(0)
    model = ConformerEncoder().eval()
    feats = torch.randn(2, 50, 40)
    return model, (feats, torch.tensor([50, 41]))
