from torch import nn


class Model(nn.Module):
    def forward(self, x):
        rows = x.view(2, 4)
        saturated = any(row.abs().max() > 3 for row in rows)  # break
        return rows.tanh(), saturated
