"""RNN-Transducer model: small Transformer-free transcription network,
LSTM prediction network and additive joint network.

forward() returns the full (B, T, U+1, V) joint log-probabilities that an
RNN-T loss would consume, plus a greedy transducer decode of the first utterance.
"""
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class RNNTConfig:
    n_mels: int = 40
    enc_dim: int = 64
    pred_dim: int = 48
    joint_dim: int = 64
    vocab: int = 32
    blank: int = 0
    max_symbols_per_step: int = 3


class TranscriptionNet(nn.Module):
    def __init__(self, cfg: RNNTConfig):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv1d(cfg.n_mels, cfg.enc_dim, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv1d(cfg.enc_dim, cfg.enc_dim, 3, stride=2, padding=1), nn.ReLU(),
        )
        self.proj = nn.Linear(cfg.enc_dim, cfg.enc_dim)

    def forward(self, feats):
        return self.proj(self.conv(feats.transpose(1, 2)).transpose(1, 2))


class PredictionNet(nn.Module):
    def __init__(self, cfg: RNNTConfig):
        super().__init__()
        self.blank = cfg.blank
        self.embed = nn.Embedding(cfg.vocab, cfg.pred_dim)
        self.lstm = nn.LSTM(cfg.pred_dim, cfg.pred_dim, num_layers=1, batch_first=True)

    def forward(self, labels, state=None):
        # prepend blank as start-of-sequence
        sos = torch.full_like(labels[:, :1], self.blank)
        y = self.embed(torch.cat([sos, labels], dim=1))
        out, state = self.lstm(y, state)
        return out, state

    def step(self, token, state):
        out, state = self.lstm(self.embed(token).unsqueeze(1), state)
        return out.squeeze(1), state


class JointNet(nn.Module):
    def __init__(self, cfg: RNNTConfig):
        super().__init__()
        self.enc = nn.Linear(cfg.enc_dim, cfg.joint_dim)
        self.pred = nn.Linear(cfg.pred_dim, cfg.joint_dim)
        self.out = nn.Linear(cfg.joint_dim, cfg.vocab)

    def forward(self, f, g):
        return self.out(torch.tanh(self.enc(f) + self.pred(g)))


class RNNTransducer(nn.Module):
    def __init__(self, cfg: RNNTConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = TranscriptionNet(cfg)
        self.predictor = PredictionNet(cfg)
        self.joint = JointNet(cfg)

    @torch.no_grad()
    def greedy_decode(self, enc):  # enc: (T, D)
        cfg = self.cfg
        token = torch.tensor([cfg.blank])
        g, state = self.predictor.step(token, None)
        hyp = []
        for t in range(enc.size(0)):
            for _ in range(cfg.max_symbols_per_step):
                logits = self.joint(enc[t : t + 1], g)
                k = int(logits.argmax(-1))
                if k == cfg.blank:
                    break
                hyp.append(k)
                g, state = self.predictor.step(torch.tensor([k]), state)
        return torch.tensor(hyp + [cfg.blank] * (enc.size(0) * cfg.max_symbols_per_step - len(hyp)))

    def forward(self, feats, labels):
        f = self.encoder(feats)  # (B, T, D)
        g, _ = self.predictor(labels)  # (B, U+1, D)
        logits = self.joint(f.unsqueeze(2), g.unsqueeze(1))
        hyp = self.greedy_decode(f[0])
        return logits.log_softmax(-1), hyp


def build():
    torch.manual_seed(0)
    model = RNNTransducer(RNNTConfig()).eval()
    feats = torch.randn(2, 24, 40)
    labels = torch.randint(1, 32, (2, 5))
    return model, (feats, labels)
