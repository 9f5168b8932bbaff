"""BiLSTM-CRF sequence tagger (Lample et al., 2016) for NER.

Word embeddings + char-free BiLSTM encoder, linear emission scores and a
linear-chain CRF. forward() returns the negative log-likelihood and the
Viterbi-decoded tag sequences (padded with -1).
"""
from typing import List, Tuple

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


def log_sum_exp(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    m, _ = x.max(dim=dim, keepdim=True)
    return (m + (x - m).exp().sum(dim=dim, keepdim=True).log()).squeeze(dim)


class CRF(nn.Module):
    def __init__(self, num_tags: int):
        super().__init__()
        self.num_tags = num_tags
        self.transitions = nn.Parameter(torch.randn(num_tags, num_tags) * 0.1)
        self.start_transitions = nn.Parameter(torch.randn(num_tags) * 0.1)
        self.end_transitions = nn.Parameter(torch.randn(num_tags) * 0.1)

    def _score(self, emissions, tags, mask):
        # emissions: (B, T, K), tags/mask: (B, T)
        B, T, _ = emissions.shape
        score = self.start_transitions[tags[:, 0]] + emissions[:, 0].gather(1, tags[:, :1]).squeeze(1)
        for t in range(1, T):
            trans = self.transitions[tags[:, t - 1], tags[:, t]]
            emit = emissions[:, t].gather(1, tags[:, t : t + 1]).squeeze(1)
            score = score + (trans + emit) * mask[:, t]
        last_idx = mask.long().sum(1) - 1
        last_tags = tags.gather(1, last_idx.unsqueeze(1)).squeeze(1)
        return score + self.end_transitions[last_tags]

    def _partition(self, emissions, mask):
        alpha = self.start_transitions + emissions[:, 0]
        for t in range(1, emissions.size(1)):
            nxt = log_sum_exp(alpha.unsqueeze(2) + self.transitions + emissions[:, t].unsqueeze(1), dim=1)
            m = mask[:, t].unsqueeze(1)
            alpha = nxt * m + alpha * (1 - m)
        return log_sum_exp(alpha + self.end_transitions, dim=1)

    def neg_log_likelihood(self, emissions, tags, mask):
        mask = mask.float()
        return (self._partition(emissions, mask) - self._score(emissions, tags, mask)).mean()

    def viterbi_decode(self, emissions, lengths: List[int]) -> List[List[int]]:
        paths = []
        for b, L in enumerate(lengths):
            score = self.start_transitions + emissions[b, 0]
            history = []
            for t in range(1, L):
                s = score.unsqueeze(1) + self.transitions
                best, idx = s.max(0)
                score = best + emissions[b, t]
                history.append(idx)
            score = score + self.end_transitions
            best_last = score.argmax().item()
            path = [best_last]
            for idx in reversed(history):
                path.append(idx[path[-1]].item())
            paths.append(path[::-1])
        return paths


class BiLSTMCRF(nn.Module):
    def __init__(self, vocab_size=1000, num_tags=9, emb_dim=32, hidden=32, dropout=0.5):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=0)
        self.lstm = nn.LSTM(emb_dim, hidden // 2, num_layers=1, bidirectional=True, batch_first=True)
        self.dropout = nn.Dropout(dropout)
        self.hidden2tag = nn.Linear(hidden, num_tags)
        self.crf = CRF(num_tags)

    def _emissions(self, tokens, lengths):
        emb = self.dropout(self.embedding(tokens))
        packed = pack_padded_sequence(emb, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=tokens.size(1))
        return self.hidden2tag(self.dropout(out))

    def forward(self, tokens, lengths, tags) -> Tuple[torch.Tensor, torch.Tensor]:
        mask = tokens != 0
        emissions = self._emissions(tokens, lengths)
        loss = self.crf.neg_log_likelihood(emissions, tags, mask)
        best_paths = self.crf.viterbi_decode(emissions, lengths.tolist())
        decoded = torch.full_like(tags, -1)
        for i, p in enumerate(best_paths):
            decoded[i, : len(p)] = torch.tensor(p, dtype=tags.dtype)
        return loss, decoded


def build():
    torch.manual_seed(0)
    model = BiLSTMCRF().eval()
    lengths = torch.tensor([9, 6, 4])
    tokens = torch.randint(1, 1000, (3, 9))
    tokens[torch.arange(9)[None] >= lengths[:, None]] = 0
    tags = torch.randint(0, 9, (3, 9))
    return model, (tokens, lengths, tags)
