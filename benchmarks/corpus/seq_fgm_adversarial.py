"""Sentence classifier evaluated under FGM adversarial perturbation
(Miyato et al., 2017, "Adversarial Training Methods for Semi-Supervised Text Classification").

forward() returns both the clean logits and the logits under an embedding-space
perturbation r_adv = eps * g / ||g||, where g is the gradient of the loss w.r.t.
the word embeddings. Used to report robustness numbers alongside accuracy.
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class FGMConfig:
    vocab_size: int = 1000
    emb_dim: int = 48
    hidden: int = 64
    n_classes: int = 3
    epsilon: float = 1.0
    kernel_sizes: tuple = (2, 3, 4)


class TextCNN(nn.Module):
    """Kim (2014) CNN over (possibly perturbed) embeddings."""

    def __init__(self, cfg: FGMConfig):
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv1d(cfg.emb_dim, cfg.hidden, k) for k in cfg.kernel_sizes])
        self.dropout = nn.Dropout(0.5)
        self.fc = nn.Linear(cfg.hidden * len(cfg.kernel_sizes), cfg.n_classes)

    def forward(self, emb, mask):
        x = (emb * mask.unsqueeze(-1)).transpose(1, 2)
        pooled = [F.relu(conv(x)).amax(dim=-1) for conv in self.convs]
        return self.fc(self.dropout(torch.cat(pooled, dim=-1)))


class FGMRobustClassifier(nn.Module):
    def __init__(self, cfg: FGMConfig):
        super().__init__()
        self.cfg = cfg
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.emb_dim, padding_idx=0)
        self.encoder = TextCNN(cfg)

    def forward(self, input_ids, labels):
        mask = (input_ids != 0).float()
        emb = self.embedding(input_ids)
        clean_logits = self.encoder(emb, mask)

        with torch.enable_grad():
            emb_adv = emb.detach().clone().requires_grad_()
            loss = F.cross_entropy(self.encoder(emb_adv, mask), labels)
            (grad,) = torch.autograd.grad(loss, emb_adv)

        norm = torch.norm(grad)
        if norm != 0 and not torch.isnan(norm):
            r_adv = self.cfg.epsilon * grad / norm
        else:
            r_adv = torch.zeros_like(grad)
        adv_logits = self.encoder(emb.detach() + r_adv, mask)

        clean_acc = (clean_logits.argmax(-1) == labels).float().mean()
        adv_acc = (adv_logits.argmax(-1) == labels).float().mean()
        return clean_logits.detach(), adv_logits.detach(), clean_acc, adv_acc


def build():
    torch.manual_seed(0)
    model = FGMRobustClassifier(FGMConfig()).eval()
    ids = torch.randint(1, 1000, (4, 20))
    ids[3, 14:] = 0
    labels = torch.tensor([0, 2, 1, 0])
    return model, (ids, labels)
