import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        boxes = x.reshape(-1, 4)
        keep = (boxes[:, 0] > 0) & (boxes[:, 1] < boxes[:, 3])
        rows = keep.unsqueeze(-1).expand(-1, 4)
        kept = boxes[rows.flatten().view(boxes.shape[0], 4)]  # break
        bits = keep.view(torch.uint8)
        return kept.sum() + boxes[bits.long()].sum()
