"""splat: 3D Gaussian Splatting trainer and differentiable rasterizer.

The native core (splat._core) owns the compute; this package handles
configuration, data, evaluation and the command line.
"""
from ._core import BackendConfig, backend_available, resolve_backend
from .camera import Camera
from .gaussians import Gaussians
from .rasterizer import RasterGradients, Rasterizer, RasterOutput

__version__ = "0.1.0"

__all__ = [
    "BackendConfig",
    "Camera",
    "Gaussians",
    "RasterGradients",
    "RasterOutput",
    "Rasterizer",
    "backend_available",
    "resolve_backend",
]
