"""LSTM encoder-decoder for multivariate time-series anomaly detection
(Malhotra et al., 2016, "LSTM-based Encoder-Decoder for Multi-sensor Anomaly Detection").

Reconstruction errors are turned into anomaly flags with a mean + k * std
threshold computed on the current window batch.
"""
import numpy as np
import torch
import torch.nn as nn


class LSTMEncoder(nn.Module):
    def __init__(self, n_features, hidden, num_layers=1):
        super().__init__()
        self.lstm = nn.LSTM(n_features, hidden, num_layers=num_layers, batch_first=True)

    def forward(self, x):
        _, (h, c) = self.lstm(x)
        return h, c


class LSTMDecoder(nn.Module):
    def __init__(self, n_features, hidden, num_layers=1):
        super().__init__()
        self.lstm = nn.LSTM(n_features, hidden, num_layers=num_layers, batch_first=True)
        self.out = nn.Linear(hidden, n_features)

    def forward(self, x, state):
        y, state = self.lstm(x, state)
        return self.out(y), state


class LSTMAutoencoder(nn.Module):
    def __init__(self, n_features=4, hidden=32, num_layers=1, threshold_k=3.0):
        super().__init__()
        self.encoder = LSTMEncoder(n_features, hidden, num_layers)
        self.decoder = LSTMDecoder(n_features, hidden, num_layers)
        self.threshold_k = threshold_k

    def reconstruct(self, x):
        h, c = self.encoder(x)
        # decode in reverse order, teacher-forced with the (reversed, shifted) input
        x_rev = torch.flip(x, dims=[1])
        dec_in = torch.cat([torch.zeros_like(x_rev[:, :1]), x_rev[:, :-1]], dim=1)
        y_rev, _ = self.decoder(dec_in, (h, c))
        return torch.flip(y_rev, dims=[1])

    def forward(self, x):
        x_hat = self.reconstruct(x)
        err = (x - x_hat).pow(2).mean(-1)  # (B, T)
        err_np = err.detach().cpu().numpy()
        thr = np.mean(err_np) + self.threshold_k * np.std(err_np)
        flags = torch.from_numpy((err_np > thr).astype(np.float32))
        score = err / (float(thr) + 1e-8)
        return x_hat, score, flags


def build():
    torch.manual_seed(0)
    model = LSTMAutoencoder().eval()
    t = torch.linspace(0, 6.28, 30)
    base = torch.stack([torch.sin(t), torch.cos(t), torch.sin(2 * t), t / 6.28], -1)
    x = base.unsqueeze(0).repeat(3, 1, 1) + 0.05 * torch.randn(3, 30, 4)
    x[1, 12:15, 2] += 2.0  # injected spike
    return model, (x,)
