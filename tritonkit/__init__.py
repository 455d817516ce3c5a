"""tritonkit: a PyTorch model to a warmed-up, SLA-verified NVIDIA Triton deployment."""

import sys
import types

__version__ = "0.1.0"
__all__ = ["export", "__version__"]


class _Package(types.ModuleType):
    """``tritonkit.export`` is the export function itself (its signature and docstring for
    ``help()`` and IDEs), imported on first use so that ``import tritonkit`` loads no torch.

    The subpackage of the same name stays in sys.modules (``from tritonkit.export import
    ExportOptions``); the import system's binding of it here is ignored.
    """

    @property
    def export(self):
        from tritonkit.export import export

        return export

    @export.setter
    def export(self, _subpackage) -> None:
        pass


sys.modules[__name__].__class__ = _Package
