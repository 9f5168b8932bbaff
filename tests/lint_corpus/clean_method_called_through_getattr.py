from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.kind = "rows"

    def limit_rows(self, n):
        if n > 4:
            return 4
        return n

    def forward(self, x):
        if self.kind == "tensor":
            x = x * self.limit_rows(x)
        n = getattr(self, f"limit_{self.kind}")(x.shape[0])
        return x[:n] * 2
