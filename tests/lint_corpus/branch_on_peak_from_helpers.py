from torch import nn


def centred(values):
    return values - values.mean()


def spread(values):
    deviations = centred(values)
    return deviations.abs(), deviations.max()


class Model(nn.Module):
    def forward(self, x):
        magnitudes, peak = spread(x * 2)
        if peak > 1.0:  # break
            return magnitudes / peak
        return magnitudes
