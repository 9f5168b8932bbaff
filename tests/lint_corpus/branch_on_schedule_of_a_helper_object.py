import torch
from torch import nn


class Schedule:
    def __init__(self, steps=4):
        self.alphas = torch.linspace(0.9, 0.1, steps)
        self.timesteps = torch.arange(steps).flip(0)

    def step(self, x, timestep):
        previous = timestep - 1
        alpha = self.alphas[previous] if previous >= 0 else torch.tensor(1.0)  # break
        return x * alpha


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.schedule = Schedule()
        self.net = nn.Linear(8, 8)

    def forward(self, x):
        for t in self.schedule.timesteps:
            x = self.schedule.step(self.net(x), t)
        return x
