"""Log-mel spectrogram front-end + small conv classifier (keyword spotting).

The mel filterbank is built once at construction (HTK mel scale) so the module
has no dependency on torchaudio/librosa.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def hz_to_mel(f):
    return 2595.0 * math.log10(1.0 + f / 700.0)


def mel_to_hz(m):
    return 700.0 * (10 ** (m / 2595.0) - 1.0)


def mel_filterbank(n_mels: int, n_fft: int, sample_rate: int, f_min: float = 0.0, f_max: float = None) -> torch.Tensor:
    f_max = f_max or sample_rate / 2
    n_freqs = n_fft // 2 + 1
    all_freqs = torch.linspace(0, sample_rate // 2, n_freqs)
    m_pts = torch.linspace(hz_to_mel(f_min), hz_to_mel(f_max), n_mels + 2)
    f_pts = 700.0 * (10 ** (m_pts / 2595.0) - 1.0)
    f_diff = f_pts[1:] - f_pts[:-1]
    slopes = f_pts.unsqueeze(0) - all_freqs.unsqueeze(1)
    down = -slopes[:, :-2] / f_diff[:-1]
    up = slopes[:, 2:] / f_diff[1:]
    fb = torch.clamp(torch.min(down, up), min=0.0)
    return fb  # (n_freqs, n_mels)


class LogMelSpectrogram(nn.Module):
    def __init__(self, sample_rate=16000, n_fft=400, hop_length=160, n_mels=40, eps=1e-6):
        super().__init__()
        self.n_fft = n_fft
        self.hop_length = hop_length
        self.eps = eps
        self.register_buffer("window", torch.hann_window(n_fft), persistent=False)
        self.register_buffer("fb", mel_filterbank(n_mels, n_fft, sample_rate), persistent=False)

    def forward(self, wav):
        # pre-emphasis
        wav = torch.cat([wav[:, :1], wav[:, 1:] - 0.97 * wav[:, :-1]], dim=1)
        pad = self.n_fft // 2
        wav = F.pad(wav.unsqueeze(1), (pad, pad), mode="reflect").squeeze(1)
        frames = wav.unfold(-1, self.n_fft, self.hop_length) * self.window
        spec = torch.fft.rfft(frames, n=self.n_fft).abs().pow(2)  # (B, T, F)
        mel = spec @ self.fb
        return torch.log(mel + self.eps)


class SpecNorm(nn.Module):
    """Per-utterance mean/variance normalisation."""

    def forward(self, x):
        mean = x.mean(dim=1, keepdim=True)
        std = x.std(dim=1, keepdim=True)
        return (x - mean) / (std + 1e-5)


class KWSNet(nn.Module):
    def __init__(self, n_mels=40, n_classes=12, channels=32):
        super().__init__()
        self.frontend = LogMelSpectrogram(n_mels=n_mels)
        self.norm = SpecNorm()
        self.body = nn.Sequential(
            nn.Conv1d(n_mels, channels, 5, padding=2),
            nn.BatchNorm1d(channels),
            nn.ReLU(),
            nn.Conv1d(channels, channels, 3, padding=2, dilation=2),
            nn.BatchNorm1d(channels),
            nn.ReLU(),
        )
        self.head = nn.Linear(channels, n_classes)

    def forward(self, wav):
        feats = self.norm(self.frontend(wav))  # (B, T, M)
        h = self.body(feats.transpose(1, 2))
        h = h.mean(-1)
        return self.head(h)


def build():
    torch.manual_seed(0)
    model = KWSNet().eval()
    wav = torch.randn(2, 8000) * 0.1
    return model, (wav,)
