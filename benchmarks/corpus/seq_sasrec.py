"""SASRec: Self-Attentive Sequential Recommendation (Kang & McAuley, ICDM'18).

Item sequences are left-padded with 0. forward() scores the positive and
sampled negative items at every position, as in the reference implementation,
and also returns the scores of the full catalogue for the last position.
"""
import os
import tempfile

import torch
import torch.nn as nn


class PointWiseFeedForward(nn.Module):
    def __init__(self, hidden_units, dropout_rate):
        super().__init__()
        self.conv1 = nn.Conv1d(hidden_units, hidden_units, kernel_size=1)
        self.dropout1 = nn.Dropout(p=dropout_rate)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv1d(hidden_units, hidden_units, kernel_size=1)
        self.dropout2 = nn.Dropout(p=dropout_rate)

    def forward(self, inputs):
        outputs = self.dropout2(self.conv2(self.relu(self.dropout1(self.conv1(inputs.transpose(-1, -2))))))
        return outputs.transpose(-1, -2) + inputs


class SASRec(nn.Module):
    def __init__(self, item_num, maxlen=20, hidden_units=32, num_blocks=2, num_heads=1, dropout_rate=0.2,
                 dump_attention_to=None):
        super().__init__()
        self.item_num = item_num
        self.item_emb = nn.Embedding(item_num + 1, hidden_units, padding_idx=0)
        self.pos_emb = nn.Embedding(maxlen + 1, hidden_units, padding_idx=0)
        self.emb_dropout = nn.Dropout(p=dropout_rate)
        self.attention_layernorms = nn.ModuleList()
        self.attention_layers = nn.ModuleList()
        self.forward_layernorms = nn.ModuleList()
        self.forward_layers = nn.ModuleList()
        self.last_layernorm = nn.LayerNorm(hidden_units, eps=1e-8)
        for _ in range(num_blocks):
            self.attention_layernorms.append(nn.LayerNorm(hidden_units, eps=1e-8))
            self.attention_layers.append(nn.MultiheadAttention(hidden_units, num_heads, dropout_rate, batch_first=True))
            self.forward_layernorms.append(nn.LayerNorm(hidden_units, eps=1e-8))
            self.forward_layers.append(PointWiseFeedForward(hidden_units, dropout_rate))
        self.dump_attention_to = dump_attention_to

    def log2feats(self, log_seqs):
        seqs = self.item_emb(log_seqs) * self.item_emb.embedding_dim ** 0.5
        poss = torch.arange(1, log_seqs.size(1) + 1, device=log_seqs.device).unsqueeze(0).expand_as(log_seqs)
        poss = poss * (log_seqs != 0)
        seqs = self.emb_dropout(seqs + self.pos_emb(poss))

        tl = seqs.shape[1]
        attention_mask = ~torch.tril(torch.ones((tl, tl), dtype=torch.bool, device=seqs.device))
        attn_maps = []
        for i in range(len(self.attention_layers)):
            Q = self.attention_layernorms[i](seqs)
            mha_outputs, attn_w = self.attention_layers[i](Q, seqs, seqs, attn_mask=attention_mask)
            attn_maps.append(attn_w)
            seqs = Q + mha_outputs
            seqs = self.forward_layers[i](self.forward_layernorms[i](seqs))
        if self.dump_attention_to is not None:
            torch.save([a.detach() for a in attn_maps], os.path.join(self.dump_attention_to, "sasrec_attn.pt"))
        return self.last_layernorm(seqs)

    def forward(self, log_seqs, pos_seqs, neg_seqs):
        assert (log_seqs <= self.item_num).all(), f"item id out of range, max id {log_seqs.max()}"
        log_feats = self.log2feats(log_seqs)
        pos_logits = (log_feats * self.item_emb(pos_seqs)).sum(dim=-1)
        neg_logits = (log_feats * self.item_emb(neg_seqs)).sum(dim=-1)
        final_feat = log_feats[:, -1, :]
        all_logits = final_feat @ self.item_emb.weight[1:].t()
        return pos_logits, neg_logits, all_logits


def build():
    torch.manual_seed(0)
    n_items = 120
    model = SASRec(n_items, dump_attention_to=tempfile.gettempdir()).eval()
    B, L = 3, 20
    seq = torch.randint(1, n_items + 1, (B, L))
    seq[0, :8] = 0
    seq[2, :15] = 0
    pos = torch.roll(seq, -1, dims=1)
    pos[:, -1] = torch.randint(1, n_items + 1, (B,))
    pos[seq == 0] = 0
    neg = torch.randint(1, n_items + 1, (B, L))
    return model, (seq, pos, neg)
