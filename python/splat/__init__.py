"""splat: 3D Gaussian Splatting trainer and differentiable rasterizer.

The native core (splat._core) owns the compute; this package handles
configuration, data, evaluation and the command line.
"""
from ._core import BackendConfig, backend_available, resolve_backend
from .camera import Camera
from .config import Config, ConfigError, DataConfig, OutputConfig, TrainConfig, check_config, load_config
from .data import Dataset, DatasetError, load_dataset
from .gaussians import Gaussians
from .metrics import Evaluation, evaluate, psnr, ssim
from .rasterizer import RasterGradients, Rasterizer, RasterOutput
from .trainer import StepStats, Trainer, TrainingDiverged

__version__ = "0.1.0"

__all__ = [
    "BackendConfig", "Camera", "Config", "ConfigError", "DataConfig", "Dataset", "DatasetError",
    "Evaluation", "Gaussians", "OutputConfig", "RasterGradients", "RasterOutput", "Rasterizer",
    "StepStats", "TrainConfig", "Trainer", "TrainingDiverged", "backend_available", "check_config", "evaluate",
    "load_config", "load_dataset", "psnr", "resolve_backend", "ssim",
]
