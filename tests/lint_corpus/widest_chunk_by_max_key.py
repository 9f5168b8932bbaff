from torch import nn


class Model(nn.Module):
    def forward(self, x):
        chunks = list(x.split([3, 5]))
        chunks.sort(key=lambda c: c.numel())
        widest = max(range(len(chunks)), key=lambda i: chunks[i].shape[0])  # break
        return chunks[widest] * 2, max(x.sum(), x.mean())
