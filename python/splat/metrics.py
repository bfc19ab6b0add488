"""Image metrics and evaluation of a trained model on a dataset split."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import _core
from ._validate import as_float32, integer, real_array
from .metrics_lpips import lpips  # noqa: F401  (optional: torch and the lpips weights)


def _as_mask(mask, shape) -> np.ndarray | None:
    if mask is None:
        return None
    m = np.asarray(mask)
    if m.dtype != np.bool_ or m.shape != tuple(shape[:2]):
        raise ValueError(f"[splat] mask: expected bool {list(shape[:2])}, got {m.dtype} {list(m.shape)}")
    return m


def psnr(image, target, mask=None) -> float:
    """PSNR in dB of float images in [0, 1] (the render is clipped to [0, 1] first).
    mask: optional bool [H,W]; the mean squared error runs over its True pixels."""
    a = np.clip(real_array("image", image).astype(np.float64), 0.0, 1.0)  # in float64: a metric
    b = real_array("target", target, a.shape).astype(np.float64)
    m = _as_mask(mask, a.shape)
    d2 = (a - b) ** 2
    if m is not None:
        if not m.any():
            raise ValueError("[splat] mask: excludes every pixel")
        d2 = d2[m]
    mse = float(np.mean(d2))
    return float("inf") if mse == 0.0 else -10.0 * np.log10(mse)


def ssim(image, target, mask=None) -> float:
    """Mean SSIM (11x11 Gaussian window, sigma 1.5) over the interior at least 5
    pixels from the border: the value of scikit-image's structural_similarity
    with gaussian_weights=True, use_sample_covariance=False, data_range=1.
    mask: optional bool [H,W]; both images are 0 at its False pixels (as the
    training loss sees them) and the mean runs over its True interior pixels.
    Where there is no interior pixel to average (an image under 11 pixels on a
    side, or a mask that keeps only the border), the mean runs over every kept
    pixel with zeros outside the image: the map the training loss uses."""
    a = np.clip(as_float32("image", image, (None, None, 3)), 0.0, 1.0)
    b = as_float32("target", target, a.shape)
    m = _as_mask(mask, a.shape)
    if m is None:
        return float(_core.ssim(a, b)[1])
    if not m.any():
        raise ValueError("[splat] mask: excludes every pixel")
    return float(_core.ssim(a, b, np.ascontiguousarray(m).view(np.uint8))[1])


def box_downsample(image: np.ndarray, factor: int) -> np.ndarray:
    """Average factor x factor blocks (the image size must be a multiple)."""
    if factor == 1:
        return image
    h, w, c = image.shape
    return image.reshape(h // factor, factor, w // factor, factor, c).mean(axis=(1, 3), dtype=np.float64).astype(np.float32)


def fit_exposure(render, target, mask=None) -> np.ndarray:
    """The colour correction [A | b] (3x4) that best maps `render` onto `target`
    (least squares over the pixels of `mask`, every pixel without one):
    target ~ A rgb + b, the form `[train] exposure` learns per training view."""
    x = real_array("render", render).reshape(-1, 3).astype(np.float64)
    y = real_array("target", target, np.shape(render)).reshape(-1, 3).astype(np.float64)
    m = _as_mask(mask, np.shape(render))
    if m is not None:
        x, y = x[m.reshape(-1)], y[m.reshape(-1)]
    if len(x) < 4:
        raise ValueError(f"[splat] fit_exposure: {len(x)} pixels to fit 12 values on, need at least 4")
    design = np.concatenate([x, np.ones((len(x), 1))], axis=1)
    solution = np.linalg.lstsq(design, y, rcond=None)[0]   # [4, 3]
    return solution.T.astype(np.float32)


def exposure_halves(height: int, width: int, mask=None):
    """(fit, score) pixel masks of the fitted-exposure protocol: a view's colour
    correction is fitted on its left half and the right half is scored, each
    within `mask` when one is given. fit is None when it has fewer than 4
    pixels to fit on, and the view is then left out (score all False)."""
    left = np.zeros((height, width), bool)
    left[:, : width // 2] = True
    fit = left if mask is None else left & mask
    score = ~left if mask is None else ~left & mask
    if fit.sum() < 4:
        return None, np.zeros_like(left)
    return fit, score


def fitted_render(render, target, fit_mask):
    """`render` with the correction fitted on `fit_mask` applied (clipped to
    [0, 1] as a recorded image is), and that correction [A | b]."""
    from .exposure import apply_exposure
    correction = fit_exposure(render, target, fit_mask)
    return apply_exposure(render, correction), correction


@dataclass
class Evaluation:
    psnr: float
    ssim: float
    per_view: list = field(default_factory=list)  # [{"name", "psnr", "ssim"(, "lpips", "exposure")}]
    lpips: float | None = None      # with evaluate(lpips_net=...)
    lpips_net: str | None = None
    fit_exposure: bool = False      # with evaluate(fit_exposure=True): right halves, fitted on the left

    def to_dict(self) -> dict:
        extra = {} if self.lpips is None else {"lpips": self.lpips, "lpips_net": self.lpips_net}
        fit = {"fit_exposure": True} if self.fit_exposure else {}
        return {"psnr": self.psnr, "ssim": self.ssim} | extra | fit | {"per_view": self.per_view}


def check_supersample(dataset, supersample: int, name: str = "supersample") -> None:
    """Raises before any render when `supersample` x a view's size passes the
    native image-side limit (docs/architecture.md, "Numeric limits")."""
    from . import _core
    side = supersample * max(max(c.width, c.height) for c in dataset.cameras)
    if side > _core.MAX_IMAGE_SIDE:
        raise ValueError(f"[splat] {name}: {supersample}x renders of these views are {side} pixels a side, "
                         f"past the limit of {_core.MAX_IMAGE_SIDE}")


def evaluate(trainer, dataset, *, supersample: int = 1, renders: dict | None = None,
             masked: bool = False, lpips_net: str | None = None, lpips_device=None, progress=None,
             fit_exposure: bool = False) -> Evaluation:
    """Mean PSNR and SSIM of `trainer`'s renders against `dataset`'s images,
    each view at its own size.

    supersample > 1 renders each view at that multiple of the dataset's size and
    box-averages it down (e.g. an 800x800 model evaluated on 400x400 test images).
    masked: leave out the pixels the dataset's masks exclude (the `[data]
    eval_masked` setting; views without a mask count every pixel; a view masked
    entirely is skipped). Pass a dict as `renders` to receive the rendered
    images by view name. lpips_net: also LPIPS with that backbone ("alex" or
    "vgg", splat.metrics_lpips) on `lpips_device` (default: CUDA when torch
    sees one); its weights are checked before the first render. progress: a callable
    given (views done, views) after each view. fit_exposure: for a model trained
    with exposure compensation, whose renders show the training views' average
    exposure: each view's colour correction is fitted on its left half
    (`fit_exposure`, least squares) and applied to the render, and the metrics
    score the right half alone (a view's entry keeps its correction as
    "exposure"; `renders` receives the corrected render)."""
    supersample = integer("supersample", supersample, 1)
    if len(dataset.cameras):
        check_supersample(dataset, int(supersample))
    if lpips_net is not None:
        from . import metrics_lpips
        metrics_lpips.check_sizes(lpips_net, dataset.cameras)
        metrics_lpips.model(lpips_net, lpips_device)
    masks = getattr(dataset, "masks", None) if masked else None
    per_view = []
    for i, (cam, image, name) in enumerate(zip(dataset.cameras, dataset.images, dataset.names)):
        mask = None if masks is None else masks[i]
        fit_mask = None
        if fit_exposure:  # fitted on the left half, scored on the right
            fit_mask, mask = exposure_halves(cam.height, cam.width, mask)
        if mask is None or mask.any():
            render = trainer.render(cam.scaled(supersample) if supersample > 1 else cam,
                                    background=dataset.background)
            render = box_downsample(render, supersample)
            target = image.astype(np.float32) / 255.0
            correction = None
            if fit_mask is not None:
                render, correction = fitted_render(render, target, fit_mask)
            entry = {"name": name, "psnr": psnr(render, target, mask), "ssim": ssim(render, target, mask)}
            if correction is not None:
                entry["exposure"] = correction.tolist()
            if lpips_net is not None:
                entry["lpips"] = lpips(render, target, lpips_net, mask=mask, device=lpips_device)
            if mask is not None:
                entry["valid_fraction"] = float(mask.mean())
            per_view.append(entry)
            if renders is not None:
                renders[name] = render
        if progress is not None:
            progress(i + 1, len(dataset.cameras))
    if not per_view:
        raise ValueError("[splat] dataset: has no views to evaluate")
    return Evaluation(psnr=float(np.mean([v["psnr"] for v in per_view])),
                      ssim=float(np.mean([v["ssim"] for v in per_view])), per_view=per_view,
                      lpips=None if lpips_net is None else float(np.mean([v["lpips"] for v in per_view])),
                      lpips_net=lpips_net, fit_exposure=bool(fit_exposure))
