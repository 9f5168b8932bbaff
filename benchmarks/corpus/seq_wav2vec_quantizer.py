"""wav2vec 2.0 style pre-training head: conv feature encoder + product quantiser.

In eval mode the Gumbel-softmax is replaced by a hard argmax. We also report
codebook perplexity (how many codewords are used) and the fraction of
codewords that were hit at least once in the batch.
"""
from typing import List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


class ConvFeatureEncoder(nn.Module):
    def __init__(self, conv_layers: List[Tuple[int, int, int]]):
        super().__init__()
        layers, in_d = [], 1
        for i, (dim, k, stride) in enumerate(conv_layers):
            block = [nn.Conv1d(in_d, dim, k, stride=stride, bias=False), nn.GELU()]
            if i == 0:
                block.insert(1, nn.GroupNorm(dim, dim, affine=True))
            layers.append(nn.Sequential(*block))
            in_d = dim
        self.conv_layers = nn.ModuleList(layers)

    def forward(self, x):
        x = x.unsqueeze(1)
        for conv in self.conv_layers:
            x = conv(x)
        return x.transpose(1, 2)  # (B, T, C)


class GumbelVectorQuantizer(nn.Module):
    def __init__(self, dim, num_vars=32, groups=2, vq_dim=32, temp=2.0):
        super().__init__()
        self.groups = groups
        self.num_vars = num_vars
        self.vars = nn.Parameter(torch.empty(1, groups * num_vars, vq_dim // groups).uniform_())
        self.weight_proj = nn.Linear(dim, groups * num_vars)
        nn.init.normal_(self.weight_proj.weight, mean=0, std=1)
        nn.init.zeros_(self.weight_proj.bias)
        self.curr_temp = temp

    def forward(self, x):
        bsz, tsz, fsz = x.shape
        logits = self.weight_proj(x.reshape(-1, fsz)).view(bsz * tsz * self.groups, -1)
        k = logits.argmax(-1)
        hard_x = F.one_hot(k, self.num_vars).to(logits.dtype).view(bsz * tsz, self.groups, -1)

        # code usage statistics
        hard_probs = hard_x.float().mean(0)
        code_perplexity = torch.exp(-torch.sum(hard_probs * torch.log(hard_probs + 1e-7), dim=-1)).sum()
        avg_probs = logits.view(bsz * tsz, self.groups, -1).float().softmax(-1).mean(0)
        prob_perplexity = torch.exp(-torch.sum(avg_probs * torch.log(avg_probs + 1e-7), dim=-1)).sum()

        flat_codes = (k.view(-1, self.groups) + torch.arange(self.groups, device=k.device) * self.num_vars).view(-1)
        counts = torch.bincount(flat_codes)
        used_fraction = (counts > 0).sum().float() / (self.groups * self.num_vars)

        q = hard_x.view(bsz * tsz, -1, 1) * self.vars.view(1, self.groups * self.num_vars, -1)
        q = q.view(bsz * tsz, self.groups, self.num_vars, -1).sum(-2).view(bsz, tsz, -1)
        return q, code_perplexity, prob_perplexity, used_fraction


class Wav2VecQuantHead(nn.Module):
    def __init__(self, conv=((32, 10, 5), (32, 3, 2), (32, 3, 2)), embed=48, final_dim=32):
        super().__init__()
        self.feature_extractor = ConvFeatureEncoder(list(conv))
        self.layer_norm = nn.LayerNorm(conv[-1][0])
        self.post_extract_proj = nn.Linear(conv[-1][0], embed)
        self.quantizer = GumbelVectorQuantizer(conv[-1][0], vq_dim=final_dim)
        self.project_q = nn.Linear(final_dim, final_dim)
        self.final_proj = nn.Linear(embed, final_dim)

    def forward(self, source):
        features = self.layer_norm(self.feature_extractor(source))
        q, code_ppl, prob_ppl, used = self.quantizer(features)
        y = self.project_q(q)
        x = self.final_proj(self.post_extract_proj(features))
        # cosine similarity between context and its own target (positive pair)
        logits = F.cosine_similarity(x, y, dim=-1) / 0.1
        return logits, code_ppl, prob_ppl, used


def build():
    torch.manual_seed(0)
    model = Wav2VecQuantHead().eval()
    wav = torch.randn(2, 1600)
    return model, (wav,)
