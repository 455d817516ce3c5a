"""A model with several outputs: class logits, an embedding and a confidence per sample.

forward() returns a tuple, so its outputs are OUTPUT__0, OUTPUT__1 and OUTPUT__2 unless
--output-names names them:

    tritonkit export examples/multi_output.py:build --name multi_output --repository model_repository --output-names logits,embedding,confidence
"""

import torch
from torch import nn


class MultiHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(8, 32), nn.GELU())
        self.classes = nn.Linear(32, 5)
        self.embedding = nn.Linear(32, 16)

    def forward(self, x: torch.Tensor):
        hidden = self.trunk(x)
        logits = self.classes(hidden)
        embedding = nn.functional.normalize(self.embedding(hidden), dim=-1)
        confidence = logits.softmax(-1).amax(-1, keepdim=True)
        return logits, embedding, confidence


def build():
    """Return the model and a batch of 3 example inputs."""
    torch.manual_seed(0)
    return MultiHead().eval(), torch.randn(3, 8)
