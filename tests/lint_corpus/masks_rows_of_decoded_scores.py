from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(8, 8)

    def decode(self, x):
        return self.head(x).sigmoid()

    def keep_confident(self, scores):
        kept = []
        for row in scores.view(2, 4):
            kept.append(row[row > 0.5])  # break
        return kept

    def forward(self, x):
        scores = self.decode(x)
        return self.keep_confident(scores)
