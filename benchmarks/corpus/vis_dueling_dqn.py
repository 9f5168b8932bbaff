"""Dueling DQN head on an Atari-style conv encoder (Wang et al., 2016).

Q(s, a) = V(s) + A(s, a) - mean_a A(s, a). Also returns the greedy action and the
distributional-free TD target pieces that the learner uses.
"""
from dataclasses import dataclass
from typing import Tuple

import torch
import torch.nn as nn


@dataclass
class DQNConfig:
    frame_stack: int = 4
    num_actions: int = 6
    hidden: int = 128
    gamma: float = 0.99
    noisy: bool = False


class NatureEncoder(nn.Module):
    def __init__(self, in_ch: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(in_ch, 16, 8, stride=4), nn.ReLU(),
            nn.Conv2d(16, 32, 4, stride=2), nn.ReLU(),
            nn.Conv2d(32, 32, 3, stride=1), nn.ReLU(),
            nn.Flatten(),
        )

    def forward(self, obs):
        return self.net(obs.float() / 255.0)


class DuelingHead(nn.Module):
    def __init__(self, in_features: int, hidden: int, num_actions: int):
        super().__init__()
        self.value = nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.advantage = nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, num_actions))

    def forward(self, feats):
        v = self.value(feats)
        a = self.advantage(feats)
        return v + a - a.mean(dim=1, keepdim=True)


class DuelingDQN(nn.Module):
    def __init__(self, cfg: DQNConfig, obs_hw: Tuple[int, int] = (52, 52)):
        super().__init__()
        self.cfg = cfg
        self.encoder = NatureEncoder(cfg.frame_stack)
        with torch.no_grad():
            n_flat = self.encoder(torch.zeros(1, cfg.frame_stack, *obs_hw)).shape[1]
        self.head = DuelingHead(n_flat, cfg.hidden, cfg.num_actions)

    def q_values(self, obs):
        return self.head(self.encoder(obs))

    def forward(self, obs, next_obs, rewards, dones):
        q = self.q_values(obs)
        greedy = q.argmax(dim=1)
        with torch.no_grad():
            # double DQN: online net picks, (here: same net) evaluates
            next_q = self.q_values(next_obs)
            next_a = next_q.argmax(dim=1, keepdim=True)
            next_v = next_q.gather(1, next_a).squeeze(1)
            target = rewards + self.cfg.gamma * (1.0 - dones.float()) * next_v
        return q, greedy, target


def build():
    torch.manual_seed(0)
    cfg = DQNConfig()
    model = DuelingDQN(cfg).eval()
    obs = torch.randint(0, 256, (4, 4, 52, 52), dtype=torch.uint8)
    next_obs = torch.randint(0, 256, (4, 4, 52, 52), dtype=torch.uint8)
    rewards = torch.tensor([0.0, 1.0, 0.0, -1.0])
    dones = torch.tensor([False, False, True, False])
    return model, (obs, next_obs, rewards, dones)
