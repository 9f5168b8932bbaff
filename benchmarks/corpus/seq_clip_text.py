"""CLIP-style contrastive text/image head.

Text tower: small causal Transformer, EOT token pooling. The image side is
assumed to be pre-extracted features (frozen backbone). forward() returns the
symmetric InfoNCE loss and retrieval accuracy, so the eval loop can just log them.
"""
import logging
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

logger = logging.getLogger(__name__)


class TextTransformer(nn.Module):
    def __init__(self, vocab_size=1000, context_length=16, width=64, heads=4, layers=2):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, width)
        self.positional_embedding = nn.Parameter(torch.randn(context_length, width) * 0.01)
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.transformer = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.ln_final = nn.LayerNorm(width)
        mask = torch.full((context_length, context_length), float("-inf")).triu_(1)
        self.register_buffer("attn_mask", mask, persistent=False)

    def forward(self, text):
        L = text.size(1)
        x = self.token_embedding(text) + self.positional_embedding[:L]
        x = self.transformer(x, mask=self.attn_mask[:L, :L], is_causal=True)
        x = self.ln_final(x)
        # eot token has the highest id in each sequence
        return x[torch.arange(x.shape[0]), text.argmax(dim=-1)]


class CLIPHead(nn.Module):
    def __init__(self, image_dim=128, embed_dim=32, text_width=64, init_logit_scale=np.log(1 / 0.07)):
        super().__init__()
        self.text = TextTransformer(width=text_width)
        self.text_projection = nn.Parameter(torch.randn(text_width, embed_dim) * text_width ** -0.5)
        self.image_projection = nn.Linear(image_dim, embed_dim, bias=False)
        self.logit_scale = nn.Parameter(torch.ones([]) * init_logit_scale)

    def encode_text(self, text):
        return F.normalize(self.text(text) @ self.text_projection, dim=-1)

    def encode_image(self, feats):
        return F.normalize(self.image_projection(feats), dim=-1)

    def forward(self, image_feats, text):
        img = self.encode_image(image_feats)
        txt = self.encode_text(text)
        logit_scale = self.logit_scale.exp().clamp(max=100)
        logits_per_image = logit_scale * img @ txt.t()
        logits_per_text = logits_per_image.t()

        labels = torch.arange(img.size(0), device=img.device)
        loss = (F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_text, labels)) / 2
        if not math.isfinite(loss):
            logger.warning("non-finite contrastive loss, logit_scale=%.3f", logit_scale.item())

        i2t_acc = (logits_per_image.argmax(-1) == labels).float().mean()
        t2i_acc = (logits_per_text.argmax(-1) == labels).float().mean()
        return {"loss": loss, "i2t_acc": i2t_acc, "t2i_acc": t2i_acc, "logits": logits_per_image}


def build():
    torch.manual_seed(0)
    model = CLIPHead().eval()
    B = 6
    text = torch.randint(1, 900, (B, 16))
    eot = torch.tensor([10, 15, 7, 12, 9, 14])
    text[torch.arange(B), eot] = 999
    text[torch.arange(16)[None] > eot[:, None]] = 0
    return model, (torch.randn(B, 128), text)
