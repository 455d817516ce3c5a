"""A 1-D convolutional model over a dynamic sequence axis: per-step features, same length out.

The input is INPUT__0, batch × sequence × 8; a load test gives the sequence a size:

    tritonkit export examples/sequence.py:build --name sequence --repository model_repository
    tritonkit loadtest --model sequence --concurrency 4 --shape INPUT__0:20,8
"""

import torch
from torch import nn


class TokenConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(8, 16, kernel_size=3, padding=1)
        self.norm = nn.LayerNorm(16)
        self.out = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # batch × sequence × 8
        hidden = self.conv(x.transpose(1, 2)).transpose(1, 2)
        return self.out(torch.relu(self.norm(hidden))) + x


def build():
    """Return the model, a batch of 2 sequences of 20 steps, and the dynamic sequence axis."""
    torch.manual_seed(0)
    return TokenConv().eval(), torch.randn(2, 20, 8), {"INPUT__0": {1: "sequence"}}
