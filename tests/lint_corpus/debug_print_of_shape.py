from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.debug = True

    def forward(self, x):
        h = x * 2
        if self.debug:
            print(f"h: {tuple(h.shape)}")  # break
        return h.sin()
