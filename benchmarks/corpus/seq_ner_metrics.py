"""Token classification (NER) head that also computes its eval metrics.

Sub-word positions that should not be scored carry label -100 (as produced by
a HF-style tokenizer alignment). The model returns loss, token accuracy,
macro-F1 over the entity classes present in the batch, and label-smoothed loss.
"""
from typing import Dict

import torch
import torch.nn as nn
import torch.nn.functional as F

IGNORE_INDEX = -100


def label_smoothed_nll(logits, target, eps=0.1):
    lprobs = logits.log_softmax(-1)
    onehot = F.one_hot(target)
    if onehot.size(-1) < lprobs.size(-1):
        onehot = F.pad(onehot, (0, lprobs.size(-1) - onehot.size(-1)))
    smooth = (1 - eps) * onehot.float() + eps / lprobs.size(-1)
    return -(smooth * lprobs).sum(-1).mean()


def macro_f1(preds, labels, ignore_label=0):
    classes = torch.unique(torch.cat([preds, labels]))
    classes = classes[classes != ignore_label]
    f1s = []
    for c in classes:
        tp = ((preds == c) & (labels == c)).sum().float()
        fp = ((preds == c) & (labels != c)).sum().float()
        fn = ((preds != c) & (labels == c)).sum().float()
        f1s.append(2 * tp / (2 * tp + fp + fn).clamp_min(1.0))
    if not f1s:
        return preds.new_zeros((), dtype=torch.float)
    return torch.stack(f1s).mean()


class TokenClassifier(nn.Module):
    def __init__(self, vocab=900, d=48, heads=4, layers=2, num_labels=7, dropout=0.1):
        super().__init__()
        self.num_labels = num_labels
        self.emb = nn.Embedding(vocab, d, padding_idx=0)
        self.pos = nn.Parameter(torch.zeros(1, 64, d))
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(d, num_labels)

    def forward(self, input_ids, labels) -> Dict[str, torch.Tensor]:
        h = self.emb(input_ids) + self.pos[:, : input_ids.size(1)]
        h = self.encoder(h, src_key_padding_mask=input_ids == 0)
        logits = self.classifier(self.dropout(h))

        active = labels != IGNORE_INDEX
        active_logits = logits[active]
        active_labels = labels[active]
        loss = F.cross_entropy(active_logits, active_labels)
        preds = active_logits.argmax(-1)
        acc = (preds == active_labels).float().mean()
        return {
            "logits": logits,
            "loss": loss,
            "smoothed_loss": label_smoothed_nll(active_logits, active_labels),
            "accuracy": acc,
            "macro_f1": macro_f1(preds, active_labels),
        }


def build():
    torch.manual_seed(0)
    model = TokenClassifier().eval()
    ids = torch.randint(1, 900, (3, 16))
    ids[2, 11:] = 0
    labels = torch.randint(0, 7, (3, 16))
    labels[:, 0] = IGNORE_INDEX
    labels[ids == 0] = IGNORE_INDEX
    labels[:, 5] = IGNORE_INDEX  # continuation sub-word
    return model, (ids, labels)
