"""Transformer encoder-decoder for summarisation with beam search inside forward.

Beam search follows fairseq's SequenceGenerator in spirit (length penalty,
finished hypotheses stop being expanded) but is trimmed down for a single
source sentence per batch row.
"""
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class GenConfig:
    beam_size: int = 3
    max_len: int = 10
    len_penalty: float = 1.0
    bos: int = 1
    eos: int = 2
    pad: int = 0


class Seq2SeqTransformer(nn.Module):
    def __init__(self, vocab=300, d_model=48, heads=4, layers=1, ff=96, max_pos=64):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model, padding_idx=0)
        self.pos = nn.Embedding(max_pos, d_model)
        self.transformer = nn.Transformer(
            d_model, heads, layers, layers, ff, dropout=0.1, batch_first=True
        )
        self.out = nn.Linear(d_model, vocab)

    def _emb(self, ids):
        return self.embed(ids) + self.pos(torch.arange(ids.size(1), device=ids.device))

    def encode(self, src):
        return self.transformer.encoder(self._emb(src), src_key_padding_mask=src == 0)

    def decode_step(self, prefix, memory, memory_pad):
        T = prefix.size(1)
        causal = nn.Transformer.generate_square_subsequent_mask(T, device=prefix.device)
        h = self.transformer.decoder(self._emb(prefix), memory, tgt_mask=causal, tgt_is_causal=True,
                                     memory_key_padding_mask=memory_pad)
        return self.out(h[:, -1]).log_softmax(-1)


class BeamSearchSummariser(nn.Module):
    def __init__(self, model: Seq2SeqTransformer, cfg: GenConfig):
        super().__init__()
        self.model = model
        self.cfg = cfg

    @torch.no_grad()
    def forward(self, src):
        cfg, K = self.cfg, self.cfg.beam_size
        B = src.size(0)
        memory = self.model.encode(src)
        memory = memory.repeat_interleave(K, dim=0)
        memory_pad = (src == cfg.pad).repeat_interleave(K, dim=0)

        tokens = torch.full((B * K, 1), cfg.bos, dtype=torch.long, device=src.device)
        scores = torch.zeros(B, K, device=src.device)
        scores[:, 1:] = float("-inf")  # all beams start identical
        finished = torch.zeros(B * K, dtype=torch.bool, device=src.device)

        for step in range(cfg.max_len):
            lprobs = self.model.decode_step(tokens, memory, memory_pad)  # (B*K, V)
            V = lprobs.size(-1)
            # finished beams can only extend with pad at no cost
            lprobs[finished] = float("-inf")
            lprobs[finished, cfg.pad] = 0.0
            cand = (scores.view(-1, 1) + lprobs).view(B, K * V)
            top_scores, top_idx = cand.topk(K, dim=-1)
            beam_idx = top_idx // V
            tok_idx = top_idx % V
            base = (torch.arange(B, device=src.device) * K).unsqueeze(1)
            sel = (base + beam_idx).view(-1)
            tokens = torch.cat([tokens[sel], tok_idx.view(-1, 1)], dim=1)
            finished = finished[sel] | (tok_idx.view(-1) == cfg.eos)
            scores = top_scores
            if finished.all():
                break

        lengths = (tokens != cfg.pad).sum(-1).float().view(B, K)
        normed = scores / lengths ** cfg.len_penalty
        best = normed.argmax(-1)
        out = tokens.view(B, K, -1)[torch.arange(B), best]
        return out, normed.gather(1, best[:, None]).squeeze(1)


def build():
    torch.manual_seed(0)
    model = BeamSearchSummariser(Seq2SeqTransformer(), GenConfig()).eval()
    src = torch.randint(3, 300, (2, 14))
    src[1, 10:] = 0
    return model, (src,)
