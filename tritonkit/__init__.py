"""tritonkit: a PyTorch model to a warmed-up, SLA-verified NVIDIA Triton deployment."""

__version__ = "0.1.0"
