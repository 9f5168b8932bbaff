import torch
import torch._dynamo
from torch import nn
from torch._dynamo import graph_break


class Model(nn.Module):
    def forward(self, x):
        h = x.sin()
        torch._dynamo.graph_break()  # break
        h = h.cos()
        graph_break()  # break
        return h * 2
