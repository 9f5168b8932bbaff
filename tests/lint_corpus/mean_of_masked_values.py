from torch import nn


class Model(nn.Module):
    def forward(self, x):
        keep = x > 0
        kept = x[keep]  # break
        return (
            kept.mean() if kept.numel() > 0 else x.sum()
        )  # Dynamo breaks here too (numel of a masked result): no rule yet
