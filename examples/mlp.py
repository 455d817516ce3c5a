"""A small multi-layer perceptron on float32 feature vectors (16 features → 10 classes).

The model scripts/demo.sh exports, deploys and load-tests:

    tritonkit export examples/mlp.py:build --name mlp --repository model_repository
"""

import torch
from torch import nn


def build():
    """Return the model and a batch of 4 example inputs."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 10))
    return model.eval(), torch.randn(4, 16)
