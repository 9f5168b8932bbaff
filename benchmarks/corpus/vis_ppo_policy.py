"""Actor-critic policy for PPO with invalid-action masking (Huang & Ontanon, 2020).

Illegal actions get their logits replaced by a large negative number before the
softmax, so they have ~zero probability and zero gradient. `act()` samples
with an explicit RNG so rollouts can be replayed from a seed.
"""
from dataclasses import dataclass
from typing import Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class PolicyConfig:
    obs_dim: int = 24
    num_actions: int = 9
    hidden: int = 64
    shared_trunk: bool = False
    ortho_init: bool = True
    rollout_seed: int = 7


def layer_init(layer: nn.Linear, std: float = 2 ** 0.5, bias_const: float = 0.0) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias_const)
    return layer


class MaskedCategorical:
    """Minimal categorical distribution over masked logits."""

    def __init__(self, logits: torch.Tensor, mask: torch.Tensor):
        self.mask = mask
        self.logits = torch.where(mask, logits, torch.full_like(logits, -1e8))
        self.logits = self.logits - self.logits.logsumexp(dim=-1, keepdim=True)
        self.probs = self.logits.exp()

    def sample(self, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        return torch.multinomial(self.probs, 1, generator=generator).squeeze(-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return self.logits.gather(-1, actions.unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        p_log_p = torch.where(self.mask, self.logits * self.probs, torch.zeros_like(self.probs))
        return -p_log_p.sum(-1)


class ActorCritic(nn.Module):
    def __init__(self, cfg: PolicyConfig):
        super().__init__()
        self.cfg = cfg
        init = layer_init if cfg.ortho_init else (lambda l, std=1.0: l)
        self.critic = nn.Sequential(
            init(nn.Linear(cfg.obs_dim, cfg.hidden)), nn.Tanh(),
            init(nn.Linear(cfg.hidden, cfg.hidden)), nn.Tanh(),
            init(nn.Linear(cfg.hidden, 1), std=1.0),
        )
        self.actor = nn.Sequential(
            init(nn.Linear(cfg.obs_dim, cfg.hidden)), nn.Tanh(),
            init(nn.Linear(cfg.hidden, cfg.hidden)), nn.Tanh(),
            init(nn.Linear(cfg.hidden, cfg.num_actions), std=0.01),
        )

    def get_value(self, obs):
        return self.critic(obs).squeeze(-1)

    def get_action_and_value(self, obs, action_mask, action=None, generator=None):
        if not action_mask.any(dim=-1).all():
            raise ValueError("every state must have at least one legal action")
        dist = MaskedCategorical(self.actor(obs), action_mask)
        if action is None:
            action = dist.sample(generator)
        return action, dist.log_prob(action), dist.entropy(), self.get_value(obs)

    def forward(self, obs: torch.Tensor, action_mask: torch.Tensor) -> Dict[str, torch.Tensor]:
        gen = torch.Generator(device=obs.device).manual_seed(self.cfg.rollout_seed)
        action, logprob, entropy, value = self.get_action_and_value(obs, action_mask.bool(), generator=gen)
        greedy = self.actor(obs).masked_fill(~action_mask.bool(), float("-inf")).argmax(-1)
        return {"action": action, "logprob": logprob, "entropy": entropy, "value": value, "greedy_action": greedy}


def build():
    torch.manual_seed(0)
    cfg = PolicyConfig()
    model = ActorCritic(cfg).eval()
    obs = torch.randn(16, cfg.obs_dim)
    mask = torch.rand(16, cfg.num_actions) > 0.4
    mask[:, 0] = True  # no-op is always legal
    return model, (obs, mask)
