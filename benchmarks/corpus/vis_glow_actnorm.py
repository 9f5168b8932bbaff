"""Glow (Kingma & Dhariwal, 2018) flow steps: ActNorm -> invertible 1x1 conv -> affine coupling.

ActNorm uses data-dependent initialisation: on the first batch it sees, it
sets bias/scale so that the post-actnorm activations have zero mean and unit
variance per channel. The `initialized` flag is a buffer so it is saved in the
checkpoint together with the statistics.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

logabs = lambda x: torch.log(torch.abs(x))


class ActNorm(nn.Module):
    def __init__(self, in_channel, logdet=True):
        super().__init__()
        self.loc = nn.Parameter(torch.zeros(1, in_channel, 1, 1))
        self.scale = nn.Parameter(torch.ones(1, in_channel, 1, 1))
        self.register_buffer("initialized", torch.tensor(0, dtype=torch.uint8))
        self.logdet = logdet

    @torch.no_grad()
    def initialize(self, input):
        flatten = input.permute(1, 0, 2, 3).contiguous().view(input.shape[1], -1)
        mean = flatten.mean(1).view(1, -1, 1, 1)
        std = flatten.std(1).view(1, -1, 1, 1)
        self.loc.data.copy_(-mean)
        self.scale.data.copy_(1 / (std + 1e-6))

    def forward(self, input):
        _, _, height, width = input.shape
        if self.initialized.item() == 0:
            self.initialize(input)
            self.initialized.fill_(1)
        log_abs = logabs(self.scale)
        logdet = height * width * torch.sum(log_abs)
        return self.scale * (input + self.loc), logdet


class InvConv2d(nn.Module):
    def __init__(self, in_channel):
        super().__init__()
        weight = torch.randn(in_channel, in_channel)
        q, _ = torch.linalg.qr(weight)
        self.weight = nn.Parameter(q.unsqueeze(2).unsqueeze(3))

    def forward(self, input):
        _, _, height, width = input.shape
        out = F.conv2d(input, self.weight)
        logdet = height * width * torch.slogdet(self.weight.squeeze().double())[1].float()
        return out, logdet


class ZeroConv2d(nn.Module):
    def __init__(self, in_channel, out_channel):
        super().__init__()
        self.conv = nn.Conv2d(in_channel, out_channel, 3, padding=0)
        self.conv.weight.data.zero_()
        self.conv.bias.data.zero_()
        self.scale = nn.Parameter(torch.zeros(1, out_channel, 1, 1))

    def forward(self, input):
        out = F.pad(input, [1, 1, 1, 1], value=1)
        return self.conv(out) * torch.exp(self.scale * 3)


class AffineCoupling(nn.Module):
    def __init__(self, in_channel, filter_size=32):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(in_channel // 2, filter_size, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(filter_size, filter_size, 1), nn.ReLU(inplace=True),
            ZeroConv2d(filter_size, in_channel),
        )
        self.net[0].weight.data.normal_(0, 0.05)
        self.net[0].bias.data.zero_()
        self.net[2].weight.data.normal_(0, 0.05)
        self.net[2].bias.data.zero_()

    def forward(self, input):
        in_a, in_b = input.chunk(2, 1)
        log_s, t = self.net(in_a).chunk(2, 1)
        s = torch.sigmoid(log_s + 2)
        out_b = (in_b + t) * s
        logdet = torch.sum(torch.log(s).view(input.shape[0], -1), 1)
        return torch.cat([in_a, out_b], 1), logdet


class FlowStep(nn.Module):
    def __init__(self, in_channel):
        super().__init__()
        self.actnorm = ActNorm(in_channel)
        self.invconv = InvConv2d(in_channel)
        self.coupling = AffineCoupling(in_channel)

    def forward(self, input):
        out, logdet = self.actnorm(input)
        out, det1 = self.invconv(out)
        out, det2 = self.coupling(out)
        return out, logdet + det1 + det2


def squeeze2d(x, factor=2):
    b, c, h, w = x.shape
    x = x.view(b, c, h // factor, factor, w // factor, factor)
    return x.permute(0, 1, 3, 5, 2, 4).contiguous().view(b, c * factor * factor, h // factor, w // factor)


class GlowBlock(nn.Module):
    def __init__(self, in_channel=3, n_flow=4, n_bits=5):
        super().__init__()
        self.n_bins = 2.0 ** n_bits
        self.flows = nn.ModuleList([FlowStep(in_channel * 4) for _ in range(n_flow)])
        self.prior = ZeroConv2d(in_channel * 4, in_channel * 8)

    def forward(self, x):
        n_pixel = x[0].numel()
        out = squeeze2d(x)
        logdet = 0
        for flow in self.flows:
            out, det = flow(out)
            logdet = logdet + det
        mean, log_sd = self.prior(torch.zeros_like(out)).chunk(2, 1)
        log_p = (-0.5 * math.log(2 * math.pi) - log_sd - 0.5 * (out - mean) ** 2 / torch.exp(2 * log_sd))
        log_p = log_p.view(x.shape[0], -1).sum(1)
        loss = -math.log(self.n_bins) * n_pixel + logdet + log_p
        bpd = (-loss / (math.log(2) * n_pixel)).mean()
        return out, log_p, logdet, bpd


def build():
    torch.manual_seed(0)
    model = GlowBlock().eval()
    x = torch.rand(4, 3, 16, 16) - 0.5
    return model, (x,)
