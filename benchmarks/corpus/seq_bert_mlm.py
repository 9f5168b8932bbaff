"""A small BERT-style encoder with a masked-language-modelling head.

The MLM loss is computed only over the positions that were actually masked,
following the original BERT recipe (predictions for unmasked tokens are ignored).
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class BertConfig:
    vocab_size: int = 512
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 128
    max_position: int = 64
    type_vocab_size: int = 2
    dropout: float = 0.1
    layer_norm_eps: float = 1e-12


class BertEmbeddings(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.word = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=0)
        self.position = nn.Embedding(cfg.max_position, cfg.hidden_size)
        self.token_type = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.drop = nn.Dropout(cfg.dropout)
        self.register_buffer("position_ids", torch.arange(cfg.max_position).unsqueeze(0), persistent=False)

    def forward(self, input_ids, token_type_ids):
        seq_len = input_ids.size(1)
        pos = self.position_ids[:, :seq_len]
        x = self.word(input_ids) + self.position(pos) + self.token_type(token_type_ids)
        return self.drop(self.norm(x))


class BertSelfAttention(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.h = cfg.num_heads
        self.d = cfg.hidden_size // cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, attn_mask):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, self.d).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.d)
        scores = scores + attn_mask
        probs = self.drop(scores.softmax(-1))
        ctx = (probs @ v).transpose(1, 2).reshape(b, t, c)
        return self.out(ctx)


class BertLayer(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.attn = BertSelfAttention(cfg)
        self.ln1 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.ffn = nn.Sequential(
            nn.Linear(cfg.hidden_size, cfg.intermediate_size),
            nn.GELU(),
            nn.Linear(cfg.intermediate_size, cfg.hidden_size),
        )
        self.ln2 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, attn_mask):
        x = self.ln1(x + self.drop(self.attn(x, attn_mask)))
        x = self.ln2(x + self.drop(self.ffn(x)))
        return x


class BertLMPredictionHead(nn.Module):
    def __init__(self, cfg: BertConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.transform = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.decoder_weight = word_embeddings.weight
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))

    def forward(self, h):
        h = self.norm(F.gelu(self.transform(h)))
        return F.linear(h, self.decoder_weight, self.bias)


class BertForMaskedLM(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.cfg = cfg
        self.embeddings = BertEmbeddings(cfg)
        self.layers = nn.ModuleList([BertLayer(cfg) for _ in range(cfg.num_layers)])
        self.cls = BertLMPredictionHead(cfg, self.embeddings.word)

    def forward(self, input_ids, attention_mask, token_type_ids, labels):
        ext_mask = (1.0 - attention_mask[:, None, None, :].float()) * -10000.0
        h = self.embeddings(input_ids, token_type_ids)
        for layer in self.layers:
            h = layer(h, ext_mask)

        masked = labels != -100
        if not masked.any():
            logits = self.cls(h)
            return logits, logits.new_zeros(())

        # only run the (large) vocab projection on masked positions
        masked_h = h[masked]
        target = torch.masked_select(labels, masked)
        logits = self.cls(masked_h)
        loss = F.cross_entropy(logits, target)
        return logits, loss


def build():
    torch.manual_seed(0)
    cfg = BertConfig()
    model = BertForMaskedLM(cfg).eval()
    b, t = 2, 16
    input_ids = torch.randint(5, cfg.vocab_size, (b, t))
    attention_mask = torch.ones(b, t, dtype=torch.long)
    attention_mask[1, 12:] = 0
    token_type_ids = torch.zeros(b, t, dtype=torch.long)
    token_type_ids[:, 8:] = 1
    labels = torch.full((b, t), -100, dtype=torch.long)
    pick = torch.rand(b, t) < 0.15
    pick[0, 3] = True
    labels[pick] = input_ids[pick]
    input_ids = input_ids.masked_fill(pick, 4)  # [MASK]
    return model, (input_ids, attention_mask, token_type_ids, labels)
