"""Dense passage retrieval with a cross-attention re-ranker on top.

A shared bi-encoder scores every candidate passage against the question;
the top-k are re-ranked by a small cross-encoder. Returns the re-ranked
scores and the indices of the selected passages for every question.
"""
from typing import List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


class MeanPoolEncoder(nn.Module):
    def __init__(self, vocab=800, dim=48, layers=1, heads=4, max_len=32):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim, padding_idx=0)
        self.pos = nn.Embedding(max_len, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.1, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, ids):
        mask = ids != 0
        pos = torch.arange(ids.size(1), device=ids.device)
        h = self.enc(self.tok(ids) + self.pos(pos), src_key_padding_mask=~mask)
        h = (h * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).clamp_min(1)
        return h


class CrossEncoder(nn.Module):
    def __init__(self, dim=48):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, 4, batch_first=True)
        self.score = nn.Sequential(nn.Linear(2 * dim, dim), nn.Tanh(), nn.Linear(dim, 1))

    def forward(self, q_tok, p_tok):
        ctx, _ = self.attn(q_tok, p_tok, p_tok)
        pooled = torch.cat([q_tok.mean(1), ctx.mean(1)], dim=-1)
        return self.score(pooled).squeeze(-1)


class RetrieveAndRerank(nn.Module):
    def __init__(self, dim=48, top_k=3):
        super().__init__()
        self.encoder = MeanPoolEncoder(dim=dim)
        self.reranker = CrossEncoder(dim)
        self.top_k = top_k

    def _token_states(self, ids):
        return self.encoder.tok(ids)

    def forward(self, question_ids, passage_ids) -> Tuple[torch.Tensor, torch.Tensor]:
        q = F.normalize(self.encoder(question_ids), dim=-1)  # (Q, D)
        p = F.normalize(self.encoder(passage_ids), dim=-1)  # (P, D)
        sim = q @ p.t()
        _, cand = sim.topk(self.top_k, dim=-1)  # (Q, k)

        q_tok = self._token_states(question_ids)
        all_scores, all_idx = [], []
        for qi in range(question_ids.size(0)):
            candidates: List[Tuple[torch.Tensor, torch.Tensor]] = []
            for pid in cand[qi]:
                s = self.reranker(q_tok[qi : qi + 1], self._token_states(passage_ids[pid][None]))
                candidates.append((s.squeeze(0) + sim[qi, pid], pid))
            ranked = sorted(candidates, key=lambda c: c[0], reverse=True)
            all_scores.append(torch.stack([c[0] for c in ranked]))
            all_idx.append(torch.stack([c[1] for c in ranked]))
        return torch.stack(all_scores), torch.stack(all_idx)


def build():
    torch.manual_seed(0)
    model = RetrieveAndRerank().eval()
    questions = torch.randint(1, 800, (2, 10))
    passages = torch.randint(1, 800, (6, 24))
    passages[3, 18:] = 0
    return model, (questions, passages)
