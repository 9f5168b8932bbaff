"""DCGAN generator / discriminator (Radford et al., 2015) for 32x32 images.

forward() runs G on the noise and scores both the real batch and the generated
batch with D, returning the non-saturating GAN losses for logging.
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class DCGANConfig:
    nz: int = 32
    ngf: int = 16
    ndf: int = 16
    nc: int = 3
    label_smoothing: float = 0.1


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        nn.init.normal_(m.weight.data, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        nn.init.normal_(m.weight.data, 1.0, 0.02)
        nn.init.constant_(m.bias.data, 0)


class Generator(nn.Module):
    def __init__(self, nz, ngf, nc):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False),
            nn.Tanh(),
        )

    def forward(self, z):
        if z.dim() == 2:
            z = z[:, :, None, None]
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self, nc, ndf):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 4),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 4, 1, 4, 1, 0, bias=False),
        )

    def forward(self, x):
        return self.main(x).view(-1)


class DCGAN(nn.Module):
    def __init__(self, cfg: DCGANConfig):
        super().__init__()
        self.cfg = cfg
        self.netG = Generator(cfg.nz, cfg.ngf, cfg.nc)
        self.netD = Discriminator(cfg.nc, cfg.ndf)
        self.apply(weights_init)

    def forward(self, real, z):
        fake = self.netG(z)
        d_real = self.netD(real)
        d_fake = self.netD(fake.detach())
        real_label = torch.full_like(d_real, 1.0 - self.cfg.label_smoothing)
        fake_label = torch.zeros_like(d_fake)
        loss_d = F.binary_cross_entropy_with_logits(d_real, real_label) + \
            F.binary_cross_entropy_with_logits(d_fake, fake_label)
        loss_g = F.binary_cross_entropy_with_logits(self.netD(fake), torch.ones_like(d_fake))
        stats = {
            "D(x)": torch.sigmoid(d_real).mean(),
            "D(G(z))": torch.sigmoid(d_fake).mean(),
        }
        return fake, loss_d, loss_g, stats


def build():
    torch.manual_seed(0)
    cfg = DCGANConfig()
    model = DCGAN(cfg).eval()
    real = torch.rand(4, 3, 32, 32) * 2 - 1
    z = torch.randn(4, cfg.nz)
    return model, (real, z)
