"""Extractive QA head (SQuAD-style) on a small Transformer encoder.

Predicts start/end logits over the context tokens and decodes the best span
with the usual constraints (end >= start, max answer length, span inside the
context segment). Also returns the per-example SQuAD loss.
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class QAConfig:
    vocab_size: int = 700
    hidden: int = 48
    heads: int = 4
    layers: int = 2
    max_answer_len: int = 8
    n_best: int = 5


class QAEncoder(nn.Module):
    def __init__(self, cfg: QAConfig):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab_size, cfg.hidden, padding_idx=0)
        self.seg = nn.Embedding(2, cfg.hidden)
        self.pos = nn.Embedding(128, cfg.hidden)
        layer = nn.TransformerEncoderLayer(cfg.hidden, cfg.heads, 2 * cfg.hidden, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, cfg.layers, enable_nested_tensor=False)

    def forward(self, ids, segment_ids):
        pos = torch.arange(ids.size(1), device=ids.device)
        h = self.tok(ids) + self.seg(segment_ids) + self.pos(pos)
        return self.enc(h, src_key_padding_mask=ids == 0)


class SpanQAModel(nn.Module):
    def __init__(self, cfg: QAConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = QAEncoder(cfg)
        self.qa_outputs = nn.Linear(cfg.hidden, 2)

    def best_span(self, start_logits, end_logits, context_mask):
        """n-best search over (start, end) pairs of one example."""
        cfg = self.cfg
        start_logits = start_logits.masked_fill(~context_mask, -1e4)
        end_logits = end_logits.masked_fill(~context_mask, -1e4)
        starts = start_logits.topk(cfg.n_best).indices.tolist()
        ends = end_logits.topk(cfg.n_best).indices.tolist()
        best, best_score = (0, 0), float("-inf")
        for s in starts:
            for e in ends:
                if e < s or e - s + 1 > cfg.max_answer_len:
                    continue
                score = start_logits[s].item() + end_logits[e].item()
                if score > best_score:
                    best, best_score = (s, e), score
        return best, best_score

    def forward(self, input_ids, segment_ids, start_positions, end_positions):
        h = self.encoder(input_ids, segment_ids)
        start_logits, end_logits = self.qa_outputs(h).unbind(-1)

        ignored = input_ids.size(1)
        sp = start_positions.clamp(0, ignored)
        ep = end_positions.clamp(0, ignored)
        loss = (F.cross_entropy(start_logits, sp, ignore_index=ignored, reduction="none")
                + F.cross_entropy(end_logits, ep, ignore_index=ignored, reduction="none")) / 2

        context_mask = (segment_ids == 1) & (input_ids != 0)
        spans, scores = [], []
        for b in range(input_ids.size(0)):
            (s, e), sc = self.best_span(start_logits[b], end_logits[b], context_mask[b])
            spans.append([s, e])
            scores.append(sc)
        return start_logits, end_logits, loss, torch.tensor(spans), torch.tensor(scores)


def build():
    torch.manual_seed(0)
    cfg = QAConfig()
    model = SpanQAModel(cfg).eval()
    B, T = 2, 24
    ids = torch.randint(5, cfg.vocab_size, (B, T))
    seg = torch.zeros(B, T, dtype=torch.long)
    seg[:, 7:] = 1
    ids[1, 20:] = 0
    return model, (ids, seg, torch.tensor([9, 12]), torch.tensor([11, 14]))
