"""VQ-VAE (van den Oord et al., 2017) with an EMA codebook and dead-code restarts.

The quantiser keeps exponential moving averages of cluster sizes and embedding
sums (Razavi et al. 2019). Codes that were not selected in the current batch are
re-initialised from random encoder outputs during training.
"""
from typing import Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


class VectorQuantizerEMA(nn.Module):
    def __init__(self, num_embeddings=64, embedding_dim=16, commitment_cost=0.25, decay=0.99, epsilon=1e-5):
        super().__init__()
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.commitment_cost = commitment_cost
        self.decay = decay
        self.epsilon = epsilon
        embed = torch.randn(num_embeddings, embedding_dim)
        self.register_buffer("embedding", embed)
        self.register_buffer("ema_cluster_size", torch.zeros(num_embeddings))
        self.register_buffer("ema_w", embed.clone())

    def _restart_dead_codes(self, flat_inputs, dead_codes):
        idx = torch.randint(0, flat_inputs.shape[0], (dead_codes.numel(),), device=flat_inputs.device)
        self.embedding[dead_codes] = flat_inputs[idx].detach()
        self.ema_w[dead_codes] = flat_inputs[idx].detach()
        self.ema_cluster_size[dead_codes] = 1.0

    def forward(self, inputs: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        # inputs: B, C, H, W -> B, H, W, C
        inputs = inputs.permute(0, 2, 3, 1).contiguous()
        input_shape = inputs.shape
        flat_input = inputs.view(-1, self.embedding_dim)

        distances = (flat_input.pow(2).sum(1, keepdim=True)
                     + self.embedding.pow(2).sum(1)
                     - 2 * flat_input @ self.embedding.t())
        encoding_indices = distances.argmin(dim=1)
        encodings = F.one_hot(encoding_indices, self.num_embeddings).type(flat_input.dtype)
        quantized = (encodings @ self.embedding).view(input_shape)

        if self.training:
            with torch.no_grad():
                self.ema_cluster_size.mul_(self.decay).add_(encodings.sum(0), alpha=1 - self.decay)
                n = self.ema_cluster_size.sum()
                self.ema_cluster_size.copy_((self.ema_cluster_size + self.epsilon) / (n + self.num_embeddings * self.epsilon) * n)
                self.ema_w.mul_(self.decay).add_(encodings.t() @ flat_input, alpha=1 - self.decay)
                self.embedding.copy_(self.ema_w / self.ema_cluster_size.unsqueeze(1))

        counts = torch.histc(encoding_indices.float(), bins=self.num_embeddings, min=0, max=self.num_embeddings - 1)
        dead_codes = torch.where(counts == 0)[0]
        if self.training and dead_codes.numel() > 0:
            self._restart_dead_codes(flat_input, dead_codes)

        e_latent_loss = F.mse_loss(quantized.detach(), inputs)
        loss = self.commitment_cost * e_latent_loss
        quantized = inputs + (quantized - inputs).detach()  # straight-through
        avg_probs = counts / counts.sum()
        perplexity = torch.exp(-torch.sum(avg_probs * torch.log(avg_probs + 1e-10)))
        return loss, quantized.permute(0, 3, 1, 2).contiguous(), perplexity, encoding_indices.view(input_shape[:-1])


class ResidualStack(nn.Module):
    def __init__(self, ch, res_ch, n):
        super().__init__()
        self.layers = nn.ModuleList([
            nn.Sequential(nn.ReLU(), nn.Conv2d(ch, res_ch, 3, padding=1, bias=False), nn.ReLU(), nn.Conv2d(res_ch, ch, 1, bias=False))
            for _ in range(n)
        ])

    def forward(self, x):
        for layer in self.layers:
            x = x + layer(x)
        return F.relu(x)


class VQVAE(nn.Module):
    def __init__(self, in_ch=3, hidden=32, res_hidden=16, n_res=2, num_embeddings=64, embedding_dim=16):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(in_ch, hidden // 2, 4, 2, 1), nn.ReLU(),
            nn.Conv2d(hidden // 2, hidden, 4, 2, 1), nn.ReLU(),
            nn.Conv2d(hidden, hidden, 3, 1, 1),
            ResidualStack(hidden, res_hidden, n_res),
        )
        self.pre_vq = nn.Conv2d(hidden, embedding_dim, 1)
        self.vq = VectorQuantizerEMA(num_embeddings, embedding_dim)
        self.decoder = nn.Sequential(
            nn.Conv2d(embedding_dim, hidden, 3, 1, 1),
            ResidualStack(hidden, res_hidden, n_res),
            nn.ConvTranspose2d(hidden, hidden // 2, 4, 2, 1), nn.ReLU(),
            nn.ConvTranspose2d(hidden // 2, in_ch, 4, 2, 1),
        )

    def forward(self, x):
        z = self.pre_vq(self.encoder(x))
        vq_loss, quantized, perplexity, codes = self.vq(z)
        x_recon = self.decoder(quantized)
        recon_error = F.mse_loss(x_recon, x)
        return x_recon, recon_error + vq_loss, perplexity, codes


def build():
    torch.manual_seed(0)
    model = VQVAE().eval()
    x = torch.randn(2, 3, 32, 32)
    return model, (x,)
