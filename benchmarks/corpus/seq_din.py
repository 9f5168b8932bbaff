"""Deep Interest Network (Zhou et al., KDD'18) for click-through-rate prediction.

The user's behaviour sequence is padded to a fixed length by the data loader;
the activation unit attends from the candidate item to each behaviour.
"""
import torch
import torch.nn as nn


class Dice(nn.Module):
    """Data-adaptive activation from the DIN paper."""

    def __init__(self, dim, eps=1e-8):
        super().__init__()
        self.bn = nn.BatchNorm1d(dim, eps=eps, affine=False)
        self.alpha = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        p = torch.sigmoid(self.bn(x2))
        out = p * x2 + (1 - p) * self.alpha * x2
        return out.reshape(shape)


class ActivationUnit(nn.Module):
    def __init__(self, emb_dim, hidden=(36, 16)):
        super().__init__()
        layers, d = [], 4 * emb_dim
        for h in hidden:
            layers += [nn.Linear(d, h), Dice(h)]
            d = h
        layers.append(nn.Linear(d, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, query, keys):
        # query: (B, D), keys: (B, T, D)
        q = query.unsqueeze(1).expand_as(keys)
        feat = torch.cat([q, keys, q - keys, q * keys], dim=-1)
        return self.mlp(feat).squeeze(-1)  # (B, T)


class DIN(nn.Module):
    def __init__(self, n_items=500, n_cates=40, emb_dim=8, mlp_dims=(64, 32)):
        super().__init__()
        self.item_emb = nn.Embedding(n_items, emb_dim, padding_idx=0)
        self.cate_emb = nn.Embedding(n_cates, emb_dim, padding_idx=0)
        d = 2 * emb_dim
        self.att = ActivationUnit(d)
        layers, in_dim = [], 3 * d
        for h in mlp_dims:
            layers += [nn.Linear(in_dim, h), Dice(h)]
            in_dim = h
        layers.append(nn.Linear(in_dim, 1))
        self.mlp = nn.Sequential(*layers)

    def embed(self, items, cates):
        return torch.cat([self.item_emb(items), self.cate_emb(cates)], dim=-1)

    def forward(self, hist_items, hist_cates, hist_len, target_item, target_cate):
        # trim padding shared by the whole batch
        T = int(hist_len.max().item())
        hist_items, hist_cates = hist_items[:, :T], hist_cates[:, :T]

        keys = self.embed(hist_items, hist_cates)
        query = self.embed(target_item, target_cate)
        scores = self.att(query, keys)
        mask = torch.arange(T, device=hist_len.device)[None, :] < hist_len[:, None]
        # DIN does not normalise attention weights with softmax
        scores = scores.masked_fill(~mask, 0.0)
        user_interest = torch.einsum("bt,btd->bd", scores, keys)
        hist_mean = (keys * mask.unsqueeze(-1)).sum(1) / hist_len.clamp_min(1).unsqueeze(-1)
        x = torch.cat([user_interest, query, hist_mean], dim=-1)
        return torch.sigmoid(self.mlp(x)).squeeze(-1)


def build():
    torch.manual_seed(0)
    model = DIN().eval()
    B, T = 4, 20
    hist_len = torch.tensor([12, 5, 9, 14])
    hist_items = torch.randint(1, 500, (B, T))
    hist_cates = torch.randint(1, 40, (B, T))
    pad = torch.arange(T)[None] >= hist_len[:, None]
    hist_items[pad] = 0
    hist_cates[pad] = 0
    return model, (hist_items, hist_cates, hist_len, torch.randint(1, 500, (B,)), torch.randint(1, 40, (B,)))
