"""tritonkit: a PyTorch model to a warmed-up, SLA-verified NVIDIA Triton deployment."""

__version__ = "0.1.0"


def __getattr__(name: str):
    # tritonkit.export(...) without importing torch for every other use of the package.
    if name == "export":
        import importlib

        return importlib.import_module("tritonkit.export")
    raise AttributeError(f"module 'tritonkit' has no attribute {name!r}")
