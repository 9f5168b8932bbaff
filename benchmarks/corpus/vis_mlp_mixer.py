"""MLP-Mixer (Tolstikhin et al., 2021) -- token-mixing + channel-mixing MLPs."""
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn as nn


@dataclass
class MixerConfig:
    image_size: int = 32
    patch_size: int = 4
    in_chans: int = 3
    hidden_dim: int = 64
    tokens_mlp_dim: int = 32
    channels_mlp_dim: int = 128
    num_blocks: int = 4
    num_classes: int = 100
    stochastic_depth: float = 0.1


class DropPath(nn.Module):
    """Per-sample stochastic depth. Identity at eval time."""

    def __init__(self, p: float = 0.0):
        super().__init__()
        self.p = p

    def forward(self, x):
        if self.p == 0.0 or not self.training:
            return x
        keep = 1.0 - self.p
        shape = (x.shape[0],) + (1,) * (x.ndim - 1)
        mask = x.new_empty(shape).bernoulli_(keep)
        return x * mask / keep


class MlpBlock(nn.Module):
    def __init__(self, dim, hidden_dim, act_layer=nn.GELU):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.act = act_layer()
        self.fc2 = nn.Linear(hidden_dim, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class MixerBlock(nn.Module):
    def __init__(self, num_tokens, dim, tokens_mlp_dim, channels_mlp_dim, drop_path=0.0,
                 norm_layer=partial(nn.LayerNorm, eps=1e-6)):
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.token_mixing = MlpBlock(num_tokens, tokens_mlp_dim)
        self.norm2 = norm_layer(dim)
        self.channel_mixing = MlpBlock(dim, channels_mlp_dim)
        self.drop_path = DropPath(drop_path)

    def forward(self, x):
        # x: (B, tokens, channels)
        y = self.norm1(x).transpose(1, 2)
        y = self.token_mixing(y).transpose(1, 2)
        x = x + self.drop_path(y)
        x = x + self.drop_path(self.channel_mixing(self.norm2(x)))
        return x


class MlpMixer(nn.Module):
    def __init__(self, cfg: MixerConfig):
        super().__init__()
        num_tokens = (cfg.image_size // cfg.patch_size) ** 2
        self.stem = nn.Conv2d(cfg.in_chans, cfg.hidden_dim, cfg.patch_size, stride=cfg.patch_size)
        dpr = [x.item() for x in torch.linspace(0, cfg.stochastic_depth, cfg.num_blocks)]
        self.blocks = nn.Sequential(*[
            MixerBlock(num_tokens, cfg.hidden_dim, cfg.tokens_mlp_dim, cfg.channels_mlp_dim, drop_path=dpr[i])
            for i in range(cfg.num_blocks)
        ])
        self.norm = nn.LayerNorm(cfg.hidden_dim, eps=1e-6)
        self.head = nn.Linear(cfg.hidden_dim, cfg.num_classes)
        nn.init.normal_(self.head.weight, std=0.01)
        nn.init.zeros_(self.head.bias)

    def forward(self, images):
        x = self.stem(images).flatten(2).transpose(1, 2)
        x = self.blocks(x)
        x = self.norm(x)
        return self.head(x.mean(dim=1))


def build():
    torch.manual_seed(0)
    model = MlpMixer(MixerConfig()).eval()
    images = torch.randn(4, 3, 32, 32)
    return model, (images,)
