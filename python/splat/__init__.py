"""splat: 3D Gaussian Splatting trainer and differentiable rasterizer.

The native core (splat._core) owns the compute; this package handles
configuration, data, evaluation and the command line.
"""
from ._dist import DISTRIBUTION as __distribution__  # noqa: F401 (the PyPI name; the module is `splat`)
from ._dist import warn_if_folder_shared as _warn_if_folder_shared
from ._version import __version__  # noqa: F401

_warn_if_folder_shared(__file__)

from ._backend_notice import GpuSkippedWarning
from ._core import BackendConfig, backend_available, resolve_backend
from .camera import Camera
from .config import Config, ConfigError, DataConfig, OutputConfig, TrainConfig, check_config, load_config
from .data import Dataset, DatasetError, load_dataset
from .gaussians import Gaussians
from .metrics import Evaluation, evaluate, lpips, psnr, ssim
from .rasterizer import RasterGradients, Rasterizer, RasterOutput
from .trainer import StepStats, Trainer, TrainingDiverged

__all__ = [
    "BackendConfig", "Camera", "Config", "ConfigError", "DataConfig", "Dataset", "DatasetError",
    "Evaluation", "Gaussians", "GpuSkippedWarning", "OutputConfig", "RasterGradients", "RasterOutput",
    "Rasterizer", "StepStats", "TrainConfig", "Trainer", "TrainingDiverged", "backend_available",
    "check_config", "evaluate",
    "load_config", "load_dataset", "lpips", "psnr", "resolve_backend", "ssim",
]
