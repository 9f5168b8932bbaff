"""FastSpeech 2 style variance adaptor: duration predictor + length regulator.

Phoneme encoder outputs are expanded to frame rate by repeating each hidden
state `duration` times. At inference the durations come from the predictor
(log-domain, rounded), scaled by a speaking-rate control `d_control`.
"""
import logging
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


class VariancePredictor(nn.Module):
    def __init__(self, d_model=64, filter_size=64, kernel=3, dropout=0.5):
        super().__init__()
        self.conv1 = nn.Conv1d(d_model, filter_size, kernel, padding=kernel // 2)
        self.ln1 = nn.LayerNorm(filter_size)
        self.conv2 = nn.Conv1d(filter_size, filter_size, kernel, padding=kernel // 2)
        self.ln2 = nn.LayerNorm(filter_size)
        self.drop = nn.Dropout(dropout)
        self.linear = nn.Linear(filter_size, 1)

    def forward(self, x, mask):
        h = self.drop(self.ln1(F.relu(self.conv1(x.transpose(1, 2))).transpose(1, 2)))
        h = self.drop(self.ln2(F.relu(self.conv2(h.transpose(1, 2))).transpose(1, 2)))
        out = self.linear(h).squeeze(-1)
        return out.masked_fill(mask, 0.0)


class LengthRegulator(nn.Module):
    def __init__(self):
        super().__init__()
        self.logger = logging.getLogger(self.__class__.__name__)

    def forward(self, x, durations, max_len: Optional[int] = None):
        expanded = [torch.repeat_interleave(x[b], durations[b], dim=0) for b in range(x.size(0))]
        mel_len = torch.stack([torch.tensor(e.size(0)) for e in expanded])
        if max_len is None:
            max_len = int(mel_len.max())
        if max_len > 1000:
            self.logger.warning("very long utterance after length regulation: %d frames", max_len)
        out = torch.stack([F.pad(e, (0, 0, 0, max_len - e.size(0))) for e in expanded])
        return out, mel_len


class VarianceAdaptor(nn.Module):
    def __init__(self, d_model=64, n_mels=20, vocab=80):
        super().__init__()
        self.phoneme_emb = nn.Embedding(vocab, d_model, padding_idx=0)
        enc_layer = nn.TransformerEncoderLayer(d_model, 2, 128, 0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(enc_layer, 1, enable_nested_tensor=False)
        self.duration_predictor = VariancePredictor(d_model)
        self.pitch_predictor = VariancePredictor(d_model)
        self.pitch_embedding = nn.Conv1d(1, d_model, 9, padding=4)
        self.length_regulator = LengthRegulator()
        self.mel_linear = nn.Linear(d_model, n_mels)

    def forward(self, phonemes, d_control: float = 1.0):
        src_mask = phonemes == 0
        x = self.encoder(self.phoneme_emb(phonemes), src_key_padding_mask=src_mask)
        log_d = self.duration_predictor(x, src_mask)
        durations = torch.clamp(torch.round(torch.exp(log_d) - 1) * d_control, min=0).long()
        durations = durations.masked_fill(src_mask, 0)
        # ensure every real phoneme gets at least one frame
        durations = torch.where(src_mask, durations, durations.clamp_min(1))

        pitch = self.pitch_predictor(x, src_mask)
        x = x + self.pitch_embedding(pitch.unsqueeze(1)).transpose(1, 2)

        frames, mel_len = self.length_regulator(x, durations)
        mel_mask = torch.arange(frames.size(1))[None, :] >= mel_len[:, None]
        mel = self.mel_linear(frames).masked_fill(mel_mask.unsqueeze(-1), 0.0)
        return mel, mel_len, log_d


def build():
    torch.manual_seed(0)
    model = VarianceAdaptor().eval()
    with torch.no_grad():
        model.duration_predictor.linear.bias.fill_(1.0)  # ~2 frames per phoneme
    ph = torch.randint(1, 80, (2, 10))
    ph[1, 7:] = 0
    return model, (ph, 1.0)
