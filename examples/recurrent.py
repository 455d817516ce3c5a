"""Recurrent models over a dynamic time axis: an LSTM classifier and a GRU tagger.

Two factories in one file, each named after the colon; the input is INPUT__0, batch ×
time × 6, and a load test gives the time axis a size:

    tritonkit export examples/recurrent.py:build --name lstm --repository model_repository
    tritonkit export examples/recurrent.py:build_gru --name gru --repository model_repository
    tritonkit loadtest --model lstm --concurrency 4 --shape INPUT__0:10,6
"""

import torch
from torch import nn


class LstmClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(input_size=6, hidden_size=24, num_layers=2, batch_first=True)
        self.head = nn.Linear(24, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


class GruTagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(input_size=6, hidden_size=16, batch_first=True, bidirectional=True)
        self.head = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(x)
        return self.head(out)  # one tag per time step: batch × time × 4


def build():
    """The LSTM classifier on sequences of 10 steps; the time axis is dynamic."""
    torch.manual_seed(0)
    return LstmClassifier().eval(), torch.randn(2, 10, 6), {"INPUT__0": {1: "time"}}


def build_gru():
    """The GRU tagger on sequences of 10 steps; time is dynamic in the input and the output."""
    torch.manual_seed(0)
    return GruTagger().eval(), torch.randn(2, 10, 6), {"INPUT__0": {1: "time"}}
