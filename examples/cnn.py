"""A small CNN on 3×32×32 images: conv, batch norm, pooling, a linear classifier.

    tritonkit export examples/cnn.py:build --name cnn --repository model_repository
"""

import torch
from torch import nn


def build():
    """Return the model and a batch of 2 example images."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    )
    return model.eval(), torch.randn(2, 3, 32, 32)
