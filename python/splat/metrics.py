"""Image metrics and evaluation of a trained model on a dataset split."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import _core
from ._validate import as_float32, integer, real_array


def psnr(image, target) -> float:
    """PSNR in dB of float images in [0, 1] (the render is clipped to [0, 1] first)."""
    a = np.clip(real_array("image", image).astype(np.float64), 0.0, 1.0)  # in float64: a metric
    b = real_array("target", target, a.shape).astype(np.float64)
    mse = float(np.mean((a - b) ** 2))
    return float("inf") if mse == 0.0 else -10.0 * np.log10(mse)


def ssim(image, target) -> float:
    """Mean SSIM (11x11 Gaussian window, sigma 1.5) over the interior at least 5
    pixels from the border: the value of scikit-image's structural_similarity
    with gaussian_weights=True, use_sample_covariance=False, data_range=1."""
    a = np.clip(as_float32("image", image, (None, None, 3)), 0.0, 1.0)
    b = as_float32("target", target, a.shape)
    return float(_core.ssim(a, b)[1])


def box_downsample(image: np.ndarray, factor: int) -> np.ndarray:
    """Average factor x factor blocks (the image size must be a multiple)."""
    if factor == 1:
        return image
    h, w, c = image.shape
    return image.reshape(h // factor, factor, w // factor, factor, c).mean(axis=(1, 3), dtype=np.float64).astype(np.float32)


@dataclass
class Evaluation:
    psnr: float
    ssim: float
    per_view: list = field(default_factory=list)  # [{"name", "psnr", "ssim"}]

    def to_dict(self) -> dict:
        return {"psnr": self.psnr, "ssim": self.ssim, "per_view": self.per_view}


def evaluate(trainer, dataset, *, supersample: int = 1, renders: dict | None = None) -> Evaluation:
    """Mean PSNR and SSIM of `trainer`'s renders against `dataset`'s images.

    supersample > 1 renders each view at that multiple of the dataset's size and
    box-averages it down (e.g. an 800x800 model evaluated on 400x400 test images).
    Pass a dict as `renders` to receive the rendered images by view name."""
    supersample = integer("supersample", supersample, 1)
    per_view = []
    for cam, image, name in zip(dataset.cameras, dataset.images, dataset.names):
        render = trainer.render(cam.scaled(supersample) if supersample > 1 else cam, background=dataset.background)
        render = box_downsample(render, supersample)
        target = image.astype(np.float32) / 255.0
        per_view.append({"name": name, "psnr": psnr(render, target), "ssim": ssim(render, target)})
        if renders is not None:
            renders[name] = render
    if not per_view:
        raise ValueError("[splat] dataset: has no views to evaluate")
    return Evaluation(psnr=float(np.mean([v["psnr"] for v in per_view])),
                      ssim=float(np.mean([v["ssim"] for v in per_view])), per_view=per_view)
