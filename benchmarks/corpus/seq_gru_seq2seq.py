"""GRU encoder-decoder with Bahdanau attention (Bahdanau et al., 2015).

At inference time the decoder runs greedily until every sequence in the batch
has produced <eos> or max_len is hit. Returns generated ids and the per-step
log-probabilities.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

SOS_IDX, EOS_IDX, PAD_IDX = 1, 2, 0


class Encoder(nn.Module):
    def __init__(self, vocab, emb, hid, dropout=0.2):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb, padding_idx=PAD_IDX)
        self.rnn = nn.GRU(emb, hid, bidirectional=True, batch_first=True)
        self.fc = nn.Linear(2 * hid, hid)
        self.dropout = nn.Dropout(dropout)

    def forward(self, src):
        embedded = self.dropout(self.embedding(src))
        outputs, hidden = self.rnn(embedded)
        hidden = torch.tanh(self.fc(torch.cat([hidden[-2], hidden[-1]], dim=1)))
        return outputs, hidden


class Attention(nn.Module):
    def __init__(self, enc_hid, dec_hid):
        super().__init__()
        self.attn = nn.Linear(enc_hid + dec_hid, dec_hid)
        self.v = nn.Linear(dec_hid, 1, bias=False)

    def forward(self, hidden, enc_out, src_mask):
        T = enc_out.size(1)
        h = hidden.unsqueeze(1).repeat(1, T, 1)
        energy = torch.tanh(self.attn(torch.cat([h, enc_out], dim=2)))
        scores = self.v(energy).squeeze(2).masked_fill(~src_mask, -1e10)
        return F.softmax(scores, dim=1)


class Decoder(nn.Module):
    def __init__(self, vocab, emb, enc_hid, dec_hid, dropout=0.2):
        super().__init__()
        self.attention = Attention(2 * enc_hid, dec_hid)
        self.embedding = nn.Embedding(vocab, emb, padding_idx=PAD_IDX)
        self.rnn = nn.GRU(2 * enc_hid + emb, dec_hid, batch_first=True)
        self.fc_out = nn.Linear(2 * enc_hid + dec_hid + emb, vocab)
        self.dropout = nn.Dropout(dropout)

    def forward(self, token, hidden, enc_out, src_mask):
        embedded = self.dropout(self.embedding(token)).unsqueeze(1)
        a = self.attention(hidden, enc_out, src_mask).unsqueeze(1)
        weighted = torch.bmm(a, enc_out)
        out, hidden = self.rnn(torch.cat([embedded, weighted], dim=2), hidden.unsqueeze(0))
        pred = self.fc_out(torch.cat([out, weighted, embedded], dim=2).squeeze(1))
        return pred, hidden.squeeze(0)


class Seq2Seq(nn.Module):
    def __init__(self, src_vocab=200, tgt_vocab=220, emb=32, hid=32, max_len=12):
        super().__init__()
        self.encoder = Encoder(src_vocab, emb, hid)
        self.decoder = Decoder(tgt_vocab, emb, hid, hid)
        self.max_len = max_len

    @torch.no_grad()
    def forward(self, src):
        src_mask = src != PAD_IDX
        enc_out, hidden = self.encoder(src)
        B = src.size(0)
        token = torch.full((B,), SOS_IDX, dtype=torch.long, device=src.device)
        finished = torch.zeros(B, dtype=torch.bool, device=src.device)
        outputs, scores = [], []
        step = 0
        while step < self.max_len and not finished.all():
            logits, hidden = self.decoder(token, hidden, enc_out, src_mask)
            logp = logits.log_softmax(-1)
            token = logp.argmax(-1)
            token = token.masked_fill(finished, PAD_IDX)
            outputs.append(token)
            scores.append(logp.gather(1, token[:, None]).squeeze(1).masked_fill(finished, 0.0))
            finished = finished | (token == EOS_IDX)
            step += 1
        return torch.stack(outputs, 1), torch.stack(scores, 1)


def build():
    torch.manual_seed(0)
    model = Seq2Seq().eval()
    src = torch.randint(3, 200, (2, 12))
    src[1, 9:] = PAD_IDX
    return model, (src,)
