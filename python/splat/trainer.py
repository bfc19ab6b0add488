"""Trainer: the whole 3DGS training step runs natively; this class sets it up,
drives it, and reads results back."""
from __future__ import annotations

import io
import json
import os
import time
import warnings
import zipfile
from dataclasses import dataclass

import numpy as np

from . import _core
from .data.layout import camera_layout
from ._validate import UINT32_MAX, as_float32, integer, positive_float, real_array
from ._validate import backend_config as as_backend_config
from .camera import Camera
from .config import ConfigError, TrainConfig
from .data.points import capture_points
from .gaussians import Gaussians, sh_coeffs
from .io.atomic import atomic_write
from .io.ply import save_ply
from .schedule import CAPTURE_FORMATS, capture_recipe, opacity_resets_on

SH_C0 = 0.28209479177387814
CHECKPOINT_VERSION = 1
# [train] keys added after runs were first written, with the value that keeps
# what such a run did: a checkpoint or run config without them resumes as before.
TRAIN_KEYS_ADDED = {"opacity_reset": "on", "num_downscales": 0, "resolution_schedule": 3000, "adam_moments": "float32",
                    "batch_views": 1, "blend_stop": "splat", "lr_final_fraction": 1.0,
                    "opacity_reg": 0.0, "scale_reg": 0.0, "reg_from": 0, "prune_near": 0.0}
# Raised when the loss or a parameter is no longer finite (a RuntimeError).
TrainingDiverged = _core.TrainingDiverged
# Every checkpoint member gets this timestamp, so equal states give equal bytes.
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
# A checkpoint's image size is bounded before anything is allocated for it
# (eval / render build a one-view stand-in dataset of that size): 16384^2.
MAX_IMAGE_SIDE = 1 << 16
MAX_IMAGE_PIXELS = 1 << 28
# TrainConfig fields that the native step reads (the rest shape initialisation).
_NATIVE_SETTINGS = (
    "steps", "means_lr", "means_lr_final", "log_scales_lr", "quats_lr", "opacity_lr", "sh_dc_lr",
    "sh_rest_lr", "lr_final_fraction", "opacity_reg", "scale_reg", "reg_from", "adam_eps", "adam_beta1",
    "adam_beta2", "sh_degree", "sh_degree_interval",
    "densify_from", "densify_until", "cap_scale_growth", "prune_low_weight", "densify_every",
    "densify_grad_threshold", "percent_dense",
    "split_count", "split_scale_divisor", "prune_opacity", "prune_max_screen_radius",
    "prune_max_world_scale", "opacity_reset_every", "opacity_reset_value", "ssim_weight", "seed",
    "random_background",
    "antialiased",
    "max_gaussians", "mcmc_refine_from", "mcmc_refine_until", "mcmc_refine_every", "mcmc_growth",
    "mcmc_min_opacity", "mcmc_noise_lr", "mcmc_opacity_reg", "mcmc_scale_reg",
    "absgrad", "absgrad_grad_threshold", "exposure", "exposure_lr", "exposure_lr_final", "visible_adam",
    "num_downscales", "resolution_schedule", "batch_views",
)
_STATS = ("grad_accum", "grad_count", "max_radii")
# Per-view colour corrections [views, 3, 4] ([A | b]) and their Adam moments.
_EXPOSURE = ("exposure", "adam_m.exposure", "adam_v.exposure")


@dataclass(frozen=True)
class StepStats:
    step: int
    loss: float          # NaN when the step did not read it back
    num_gaussians: int
    ms: float
    sh_degree: int
    densified: bool
    opacity_reset: bool = False


def reads_loss(first: int, last: int, every: int, end: int) -> bool:
    """Whether an update of view steps first..last reads its loss back (a sync): where it
    reaches a multiple of `every` or the run's `end`."""
    return last // every > (first - 1) // every or last >= end


def initial_gaussians(points, colors, config: TrainConfig) -> Gaussians:
    """3DGS initialisation: isotropic scales from the mean squared distance to
    the 3 nearest points, identity rotation, opacity `init_opacity`, SH DC from
    the point colour. The mcmc strategy starts from mcmc_init_opacity and the
    scales times mcmc_init_scale (gsplat's MCMC recipe: 0.5 and 0.1)."""
    points = as_float32("points", points, (None, 3))
    n = len(points)
    if n == 0:
        raise ValueError("[splat] points: the initial point cloud is empty")
    colors = as_float32("colors", colors, (n, 3))
    dist2 = np.maximum(_core.knn_mean_sq_dist(points, 3), 1e-7)
    mcmc = config.strategy == "mcmc"
    scale = np.sqrt(dist2) * (config.mcmc_init_scale if mcmc else 1.0)
    log_scales = np.repeat(np.log(scale)[:, None], 3, axis=1).astype(np.float32)
    quats = np.zeros((n, 4), np.float32)
    quats[:, 0] = 1.0
    opacity = config.mcmc_init_opacity if mcmc else config.init_opacity
    logit = np.log(opacity / (1.0 - opacity))
    opacity_logits = np.full(n, logit, np.float32)
    sh = np.zeros((n, sh_coeffs(config.sh_degree), 3), np.float32)
    sh[:, 0, :] = (colors - 0.5) / SH_C0
    return Gaussians(points, log_scales, quats, opacity_logits, sh)


def random_points(config: TrainConfig) -> tuple[np.ndarray, np.ndarray]:
    """`init_points` uniform points in [-init_extent, init_extent]^3, coloured as
    3DGS does: SH DC uniform in [0, 1/255), i.e. grey (0.5) plus a trace of noise.
    Measured on lego_400 at 2000 steps: 27.7 dB test PSNR, against 25.6 dB with
    uniformly random colours (whose saturated blobs take longer to unlearn)."""
    rng = np.random.default_rng(config.seed)
    e = config.init_extent
    points = rng.uniform(-e, e, (config.init_points, 3)).astype(np.float32)
    colors = (0.5 + SH_C0 * rng.uniform(0.0, 1.0 / 255.0, (config.init_points, 3))).astype(np.float32)
    return points, colors


def _camera_arrays(cameras) -> tuple[np.ndarray, np.ndarray]:
    w2c = np.ascontiguousarray(np.stack([c.world_to_camera for c in cameras]), dtype=np.float32)
    intr = np.asarray([[c.fx, c.fy, c.cx, c.cy] for c in cameras], dtype=np.float32)
    return w2c, intr


def _native_images(dataset) -> tuple[list, list | None]:
    """The dataset's images as the native trainer takes them (uint8 C-contiguous,
    one array per view) and its masks as uint8 0/1 (None where a view has none)."""
    images = [np.ascontiguousarray(im, dtype=np.uint8) for im in dataset.images]
    masks = getattr(dataset, "masks", None)
    if masks is not None:
        masks = [None if m is None else np.ascontiguousarray(m, dtype=bool).view(np.uint8) for m in masks]
    return images, masks


IMAGE_ALIGN = 16  # each packed view starts on this many bytes (ImageLayout::kImageAlign)


def image_bytes(dataset) -> tuple[int, int]:
    """(RGB bytes, mask bytes) the training images take on the device, packed:
    3 bytes a pixel view after view, 1 byte a pixel for each view with a mask,
    each view starting on IMAGE_ALIGN bytes."""
    masks = getattr(dataset, "masks", None)
    return packed_bytes([(c.width, c.height, masks is not None and masks[i] is not None)
                         for i, c in enumerate(dataset.cameras)])


def packed_bytes(sizes) -> tuple[int, int]:
    """image_bytes of views given as (width, height, has_mask)."""
    def align(x):
        return -(-x // IMAGE_ALIGN) * IMAGE_ALIGN
    rgb = sum(align(3 * w * h) for w, h, _ in sizes)
    mask = sum(align(w * h) for w, h, m in sizes if m)
    return int(rgb), int(mask)


def _releaser(dataset, images: list, masks: list | None):
    """The native trainer's `copied(v)`: drops every reference to view v's arrays
    (the list passed to it and the dataset's own), so its pages go back as soon
    as the device holds its copy."""
    own = dataset.images if isinstance(dataset.images, list) else None
    own_masks = getattr(dataset, "masks", None)
    own_masks = own_masks if isinstance(own_masks, list) else None

    def copied(v: int) -> None:
        images[v] = None
        if masks is not None:
            masks[v] = None
        if own is not None:
            own[v] = None
        if own_masks is not None:
            own_masks[v] = None
    return copied


def _check_dataset(dataset) -> None:
    from .data.dataset import Dataset
    if not isinstance(dataset, Dataset):
        raise TypeError(f"[splat] dataset: expected a splat Dataset (splat.load_dataset, splat.data.Dataset), "
                        f"got {type(dataset).__name__}")


def screen_prune_radius(config: TrainConfig, sizes, layout: str = "object") -> float:
    """The screen radius (pixels) densification prunes above: with prune_screen on
    ("auto": on for an "object" camera layout, splat.data.layout), prune_screen_fraction
    of the larger side of the largest view; prune_max_screen_radius where that is set
    and smaller; 0 = off. The radii are the largest over the views since the last
    densification, in pixels, so one threshold serves views of several sizes."""
    limits = [float(config.prune_max_screen_radius)] if config.prune_max_screen_radius > 0 else []
    on = config.prune_screen == "on" or (config.prune_screen == "auto" and layout == "object")
    if on and config.prune_screen_fraction > 0 and sizes:
        limits.append(float(config.prune_screen_fraction) * max(max(w, h) for w, h in sizes))
    return min(limits) if limits else 0.0


def near_scale_per_px(prune_near: float, scene_extent: float, cameras) -> float:
    """What the native pruning near the cameras compares a Gaussian's largest
    scale with, per pixel of its largest screen radius: a Gaussian of scale s drawn
    at radius r (3 sigma) by a view of focal length f was about 3 s f / r away, so
    one under r times (prune_near x extent) / (3 f) was nearer than prune_near x
    extent. f is the views' largest and s the largest axis, which both make the
    estimate err towards far (kept); off the image's centre the projection widens a
    splat (about 1 / cos^2 of its angle from the axis), and the estimate errs near."""
    focal = max(max(float(c.fx), float(c.fy)) for c in cameras)
    return float(prune_near) * float(scene_extent) / (3.0 * focal)


class Trainer:
    """Trains Gaussians on a dataset; every step runs natively with the GIL released."""

    def __init__(self, dataset, train_config: TrainConfig, backend_config, state: dict, step: int = 0,
                 *, scene_extent: float | None = None, image_budget: int = 0, release_images: bool = False):
        """release_images: drop the dataset's images view by view as the trainer copies
        them (Dataset.release_images at the end), so the host never holds two copies of
        every view; the dataset keeps its cameras and names, not its pixels."""
        _check_dataset(dataset)
        if not isinstance(release_images, bool):
            raise TypeError(f"[splat] release_images: expected True or False, got {release_images!r}")
        if not isinstance(train_config, TrainConfig):
            raise TypeError(f"[splat] train_config: expected splat.TrainConfig, got {type(train_config).__name__}")
        errors = train_config.errors()  # attributes may have been assigned since construction
        if errors:
            raise ConfigError(errors)
        backend_config = as_backend_config("backend_config", backend_config)
        if len(dataset) == 0:
            raise ValueError("[splat] dataset: has no views")
        step = integer("step", step, 0, UINT32_MAX)
        state = check_state(state, train_config.sh_degree)
        self.config = train_config
        self.backend_config = backend_config
        self.scene_extent = positive_float("scene_extent", dataset.scene_extent if scene_extent is None
                                           else scene_extent)
        self.background = tuple(float(b) for b in dataset.background)
        # (width, height) of every training view: each view trains at its own size.
        self.sizes = [(int(c.width), int(c.height)) for c in dataset.cameras]
        settings = {k: getattr(train_config, k) for k in _NATIVE_SETTINGS}
        settings["mcmc"] = train_config.strategy == "mcmc"
        settings["bf16_moments"] = train_config.adam_moments == "bfloat16"
        settings["chunked_stop"] = train_config.blend_stop == "chunk"
        # What the cameras' layout (splat.data.layout) and the dataset's kind decide:
        # opacity resets, and screen-size pruning, which runs after the first reset
        # only (0 without resets: it never runs), or without resets near the cameras
        # (prune_near).
        self.camera_layout = camera_layout(dataset.cameras)
        self.opacity_resets = opacity_resets_on(train_config, dataset.format, self.camera_layout)
        settings["opacity_resets"] = self.opacity_resets
        near = not self.opacity_resets and train_config.prune_near > 0
        self.screen_prune_px = (screen_prune_radius(train_config, self.sizes, self.camera_layout)
                                if self.opacity_resets or near else 0.0)
        settings["prune_max_screen_radius"] = self.screen_prune_px
        settings["prune_near_scale_per_px"] = (near_scale_per_px(train_config.prune_near, self.scene_extent,
                                                                 dataset.cameras) if near else 0.0)
        if isinstance(image_budget, bool) or not isinstance(image_budget, (int, np.integer)) or image_budget < 0:
            raise ValueError(f"[splat] image_budget: expected a number of bytes >= 0, got {image_budget!r}")
        settings.update(scene_extent=self.scene_extent, background=self.background,
                        image_budget_bytes=int(image_budget))
        w2c, intr = _camera_arrays(dataset.cameras)
        images, masks = _native_images(dataset)
        self.masked_views = 0 if masks is None else sum(m is not None for m in masks)
        copied = _releaser(dataset, images, masks) if release_images else None
        self._native = _core.Trainer(backend_config, settings, w2c, intr, images, masks, state, step, copied)
        if release_images:
            dataset.release_images()
        self.history: list[tuple[int, float, int]] = []  # (step, loss, #Gaussians)

    @classmethod
    def from_dataset(cls, dataset, train_config: TrainConfig | None = None, backend_config=None,
                     *, initial: Gaussians | None = None, image_budget: int = 0,
                     release_images: bool = False) -> "Trainer":
        """A trainer initialised from the dataset's point cloud (random points when it has none).
        The recipe is the one the scene gets (`trainer.config`): for random points the
        preset's for such a start (TrainConfig.for_random_start), for a capture
        splat.schedule.capture_recipe's. image_budget: device bytes the training images may
        take before they are streamed from host memory a view a step ahead (0: the backend's
        default, half the free device memory; the cpu backend streams only when given one).
        release_images: see Trainer()."""
        _check_dataset(dataset)
        config = train_config if train_config is not None else TrainConfig()
        if not isinstance(config, TrainConfig):
            raise TypeError(f"[splat] train_config: expected splat.TrainConfig, got {type(config).__name__}")
        if dataset.format in CAPTURE_FORMATS:
            config = capture_recipe(config, dataset.format, camera_layout(dataset.cameras))
        if initial is None:
            if dataset.format in CAPTURE_FORMATS:   # SfM points (random points in the views when too few)
                points, colors, note = capture_points(dataset, config.init_points, config.seed)
                if note:
                    warnings.warn(f"[splat] {note}", stacklevel=2)
                initial = initial_gaussians(points, colors, config)
            elif dataset.points is not None and len(dataset.points):
                colors = dataset.point_colors if dataset.point_colors is not None else np.full_like(dataset.points, 0.5)
                initial = initial_gaussians(dataset.points, colors, config)
            else:   # random points: the preset's recipe for such a start (TrainConfig.for_random_start)
                config = config.for_random_start()
                initial = initial_gaussians(*random_points(config), config)
        elif not isinstance(initial, Gaussians):
            raise TypeError(f"[splat] initial: expected splat.Gaussians, got {type(initial).__name__}")
        state = dict(means=initial.means, log_scales=initial.log_scales, quats=initial.quats,
                     opacity_logits=initial.opacity_logits, sh=initial.sh)
        return cls(dataset, config, backend_config, state, image_budget=image_budget, release_images=release_images)

    # ------------------------------------------------------------------ stepping
    @property
    def step_count(self) -> int:
        return self._native.step_count

    @property
    def num_gaussians(self) -> int:
        return self._native.num_gaussians

    @property
    def width(self) -> int:
        """The width of every training view (ValueError when the sizes differ; see `sizes`)."""
        return self._uniform_size()[0]

    @property
    def height(self) -> int:
        """The height of every training view (ValueError when the sizes differ; see `sizes`)."""
        return self._uniform_size()[1]

    def _uniform_size(self) -> tuple[int, int]:
        distinct = sorted(set(self.sizes))
        if len(distinct) != 1:
            raise ValueError(f"[splat] trainer: the training views have different sizes "
                             f"({', '.join(f'{w}x{h}' for w, h in distinct[:4])}{', ...' if len(distinct) > 4 else ''})")
        return distinct[0]

    @property
    def image_storage(self) -> dict:
        """Where the training images live: image_bytes (every view packed), device_bytes,
        budget_bytes (0: none known) and streamed (from host memory, a view a step ahead)."""
        return self._native.image_storage()

    @property
    def backend(self) -> str:
        return self._native.backend

    def step(self, read_loss: bool = True, until: int | None = None) -> StepStats:
        """One training step: one view, or with train.batch_views = B one update over the next B
        views (step_count advances by B; the loss read back is their mean). A batch ends early
        at train.steps and at `until`, a view step you name (an evaluation, a checkpoint), so
        that the state exists there; the next batch starts after it. On GPUs, read_loss=False
        avoids the sync that reading the loss needs: nothing in a step waits for the GPU. A
        step whose (tile, Gaussian) pairs outgrew the device's buffers changes nothing and runs
        again at the next sync point (reading the loss, densifying, the state, a render), with
        the same result (docs/gpu.md).

        Raises TrainingDiverged when the loss read back is not finite, or a
        parameter is not at the check every 100 steps (then and after, every
        call raises; the state is not finite)."""
        d = self._native.step(read_loss, None if until is None else self._until(until))
        stats = StepStats(d["step"], d["loss"], d["num_gaussians"], d["ms"], d["sh_degree"], d["densified"],
                          d["opacity_reset"])
        if read_loss:
            self.history.append((stats.step, stats.loss, stats.num_gaussians))
        return stats

    def run(self, n: int, progress: bool = True, loss_every: int = 10) -> StepStats | None:
        """n view steps (step_count advances by n: with train.batch_views = B, updates of B
        views, the last ending at the n-th), with a progress bar (loss, #Gaussians, steps/s)
        when `progress`. The loss is read back every `loss_every` view steps and at the end."""
        n = integer("n", n, 0)
        loss_every = integer("loss_every", loss_every, 1)
        start = self.step_count
        end = start + n
        last = None

        def one() -> tuple[StepStats, bool]:
            """The next update, and whether it read its loss back."""
            first, last_view = self.update_views(end)
            read = reads_loss(first, last_view, loss_every, end)
            return self.step(read_loss=read, until=end), read

        if not progress:
            while self.step_count < end:
                last, _ = one()
            return last
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
        columns = (TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("loss {task.fields[loss]:.4f}  {task.fields[gaussians]:,} Gaussians  "
                              "{task.fields[rate]:.1f} steps/s"), TimeRemainingColumn())
        with Progress(*columns, transient=False) as bar:
            task = bar.add_task("train", total=n, loss=float("nan"), gaussians=self.num_gaussians, rate=0.0)
            t0 = time.perf_counter()
            while self.step_count < end:
                last, read = one()
                if read:   # the bar moves with the reads, so it shows no unread state's loss
                    done = self.step_count - start
                    rate = done / max(time.perf_counter() - t0, 1e-9)
                    bar.update(task, completed=done, loss=last.loss, gaussians=last.num_gaussians, rate=rate)
        return last

    def update_views(self, until: int) -> tuple[int, int]:
        """(first, last): the view steps the next `step(until=until)` trains, a batch of
        train.batch_views views ending early at train.steps and at `until` (the native rule)."""
        first = self.step_count + 1
        return first, int(self._native.batch_last(first, self._until(until)))

    def _until(self, until) -> int:
        """`until` checked: a view step after the ones trained."""
        return integer("until", until, self.step_count + 1, UINT32_MAX)

    def check_finite(self) -> None:
        """Checks every parameter for NaN and infinity now (a reduction on the
        device, five counts read back); raises TrainingDiverged naming them."""
        self._native.check_finite()

    @property
    def diverged_step(self) -> int | None:
        """The step at which training diverged; None while it has not."""
        return self._native.diverged_step

    def resets_opacity_at(self, step: int) -> bool:
        """Whether the schedule resets opacities at 1-based `step` (see
        docs/architecture.md: never in the last opacity_reset_every steps)."""
        return self._native.resets_opacity_at(int(step))

    def downscale_level(self, step: int) -> int:
        """The resolution level 1-based `step` trains at (train.num_downscales):
        its view at 1/2^level of its size, box-filtered."""
        return self._native.downscale_level(int(step))

    # ------------------------------------------------------------------ results
    def render(self, camera: Camera, background=None) -> np.ndarray:
        """The current Gaussians rendered from `camera`: float32 [H,W,3]."""
        if not isinstance(camera, Camera):
            raise TypeError(f"[splat] camera: expected splat.Camera, got {type(camera).__name__}")
        bg = None if background is None else as_float32("background", background, (3,))
        c = camera
        return self._native.render(c.world_to_camera, c.fx, c.fy, c.cx, c.cy, c.width, c.height, bg)

    def blend_weights(self) -> np.ndarray:
        """Each Gaussian's blend weight [N]: alpha T summed over every pixel of every training
        view (at the current step's resolution), as the forward blends and stops. Occluded,
        faint and off-screen Gaussians score near 0; `train.prune_low_weight` prunes by it."""
        return self._native.blend_weights()

    def state(self) -> dict:
        """Every array of the training state (parameters, Adam moments, statistics): numpy copies."""
        return self._native.state()

    def exposure(self) -> np.ndarray | None:
        """The learned colour correction of every training view, [views, 3, 4] float32
        ([A | b]: corrected = A rgb + b), in dataset order; None unless train.exposure."""
        return self._native.state().get("exposure") if self.config.exposure else None

    def save_exposure(self, path) -> None:
        """The learned colour corrections as a .npy of [views, 3, 4] float32, written atomically."""
        exposure = self.exposure()
        if exposure is None:
            raise ValueError("[splat] exposure: the run has no colour corrections (train.exposure is false)")
        buf = io.BytesIO()
        np.save(buf, exposure)
        with atomic_write(path, "wb") as f:
            f.write(buf.getvalue())

    def gaussians(self) -> Gaussians:
        s = self._native.state()
        return Gaussians(s["means"], s["log_scales"], s["quats"], s["opacity_logits"], s["sh"])

    def save_ply(self, path) -> None:
        """The standard 3DGS PLY, written atomically."""
        save_ply(path, self.gaussians())

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, path) -> None:
        """Everything needed to continue exactly: parameters, Adam moments,
        densification statistics, step (the random streams are counter-based:
        seed + step is their whole state) and the configs. Written atomically."""
        # width / height: the largest training view (what a render of the model
        # defaults to); sizes: every training view's, which load_checkpoint checks.
        w, h = max(self.sizes, key=lambda s: (s[0] * s[1], s))
        meta = dict(version=CHECKPOINT_VERSION, step=self.step_count, train_config=self.config.to_dict(),
                    backend_config=self.backend_config.to_dict(), scene_extent=self.scene_extent,
                    background=list(self.background), width=w, height=h,
                    sizes=[list(s) for s in self.sizes])
        state = self.state()
        bad = [k for k, a in state.items() if not np.isfinite(a).all()]
        if bad:
            raise TrainingDiverged(f"[splat] checkpoint {path}: not written: the training state at step "
                                   f"{self.step_count} is not finite ({', '.join(bad)})")
        data = _npz_bytes({"__meta__": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **state})
        with atomic_write(path, "wb") as f:
            f.write(data)

    @classmethod
    def load_checkpoint(cls, path, dataset, backend_config=None, *, image_budget: int = 0,
                        for_render: bool = False) -> "Trainer":
        """A trainer in exactly the saved state, training on `dataset` (the same views).
        for_render: a trainer only to render from (any stand-in views): without the
        per-view exposure corrections, which renders never apply."""
        _check_dataset(dataset)
        meta, arrays = read_checkpoint(path)
        check_checkpoint_sizes(meta, dataset, path)
        if for_render:
            meta["train_config"] = dict(meta["train_config"], exposure=False)
            arrays = {k: v for k, v in arrays.items() if k not in _EXPOSURE}
        try:
            config = TrainConfig(**meta["train_config"])
            arrays = check_state(arrays, config.sh_degree)
            if backend_config is None:
                backend_config = _core.BackendConfig(meta.get("backend_config", {}))
        except (ValueError, TypeError) as exc:  # ConfigError included: name the file, not just the key
            reason = " ".join(str(exc).replace("[splat] ", "").split())
            raise ValueError(f"[splat] checkpoint {path}: {reason}") from None
        return cls(dataset, config, backend_config, arrays, step=meta["step"], scene_extent=meta["scene_extent"],
                   image_budget=image_budget)


def checkpoint_sizes(meta: dict) -> list[tuple[int, int]] | None:
    """Every training view's (width, height) of a checkpoint header; None for
    checkpoints that recorded one size only (then every view had it)."""
    sizes = meta.get("sizes")
    if sizes is None:
        return None
    return [(int(w), int(h)) for w, h in sizes]


def check_checkpoint_sizes(meta: dict, dataset, path) -> None:
    """ValueError unless `dataset`'s views have the sizes the checkpoint was trained on."""
    got = [(c.width, c.height) for c in dataset.cameras]
    want = checkpoint_sizes(meta)
    if want is None:
        want = [(int(meta["width"]), int(meta["height"]))] * len(got)
    if len(want) == len(got):  # the same views: each its own size
        for i, (g, w) in enumerate(zip(got, want)):
            if g != w:
                raise ValueError(f"[splat] dataset: view {dataset.names[i]} is {g[0]}x{g[1]}, the checkpoint "
                                 f"{path} was trained on {w[0]}x{w[1]} there")
        return
    # Other views (a render stand-in, a subset): each must have a trained size.
    known = set(want)
    for i, g in enumerate(got):
        if g not in known:
            shown = ", ".join(f"{w}x{h}" for w, h in sorted(known)[:4]) + (", ..." if len(known) > 4 else "")
            raise ValueError(f"[splat] dataset: view {dataset.names[i]} is {g[0]}x{g[1]}, the checkpoint {path} "
                             f"was trained on {shown}")


def _npz_bytes(arrays: dict) -> bytes:
    """The .npz archive np.savez writes (uncompressed members NAME.npy), with
    a fixed timestamp on every member: its bytes depend on the arrays alone."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, a in arrays.items():
            with z.open(zipfile.ZipInfo(name + ".npy", date_time=_ZIP_TIME), "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(a), allow_pickle=False)
    return buf.getvalue()


def read_checkpoint(path) -> tuple[dict, dict]:
    """(header, arrays) of a checkpoint written by Trainer.save_checkpoint.
    A missing file raises FileNotFoundError, anything unreadable ValueError,
    both naming the file."""
    if os.path.isdir(path):
        raise IsADirectoryError(f"[splat] checkpoint {path}: is a folder, not a checkpoint file")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"[splat] checkpoint {path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        meta = json.loads(arrays.pop("__meta__").tobytes().decode())
        if not isinstance(meta, dict):
            raise ValueError("its header is not an object")
    except Exception as exc:  # any failure to parse means: not a usable checkpoint
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise ValueError(f"[splat] checkpoint {path}: not a readable splat checkpoint ({reason})") from None
    if meta.get("version") != CHECKPOINT_VERSION:
        raise ValueError(f"[splat] checkpoint {path}: version {meta.get('version')} is not supported")
    try:
        _check_header(meta)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"[splat] checkpoint {path}: {str(exc).removeprefix('[splat] ')}") from None
    return meta, arrays


def _check_header(meta: dict) -> None:
    """The header values a checkpoint is used with, checked (errors name the key)."""
    for key in ("step", "width", "height", "train_config", "scene_extent"):
        if key not in meta:
            raise ValueError(f"header: missing '{key}'")
    meta["step"] = integer("step", meta["step"], 0, UINT32_MAX)
    meta["width"] = integer("width", meta["width"], 1, MAX_IMAGE_SIDE)
    meta["height"] = integer("height", meta["height"], 1, MAX_IMAGE_SIDE)
    if meta["width"] * meta["height"] > MAX_IMAGE_PIXELS:
        raise ValueError(f"width x height: {meta['width']}x{meta['height']} is more than {MAX_IMAGE_PIXELS} pixels")
    if not isinstance(meta["train_config"], dict):
        raise TypeError(f"train_config: expected an object, got {type(meta['train_config']).__name__}")
    meta["train_config"] = {**TRAIN_KEYS_ADDED, **meta["train_config"]}
    if not isinstance(meta.get("backend_config", {}), dict):
        raise TypeError(f"backend_config: expected an object, got {type(meta['backend_config']).__name__}")
    meta["scene_extent"] = positive_float("scene_extent", meta["scene_extent"])
    if "sizes" in meta:   # every training view's [width, height]
        sizes = meta["sizes"]
        if not isinstance(sizes, list) or not sizes or \
                not all(isinstance(s, (list, tuple)) and len(s) == 2 for s in sizes):
            raise ValueError(f"sizes: expected a list of [width, height], got {sizes!r:.80}")
        meta["sizes"] = [[integer("sizes", w, 1, MAX_IMAGE_SIDE), integer("sizes", h, 1, MAX_IMAGE_SIDE)]
                         for w, h in sizes]
    if "background" in meta:
        bg = meta["background"]
        if not isinstance(bg, (list, tuple)) or len(bg) != 3:
            raise ValueError(f"background: expected 3 numbers in [0, 1], got {bg!r}")
        bg = tuple(float(x) for x in real_array("background", bg, (3,)))
        if not all(0.0 <= b <= 1.0 for b in bg):
            raise ValueError(f"background: expected 3 numbers in [0, 1], got {meta['background']!r}")
        meta["background"] = bg


def check_state(state, sh_degree: int) -> dict:
    """A training state dict (Trainer.state() / a checkpoint's arrays) checked
    and converted: the five parameter arrays present and consistent (as
    splat.Gaussians checks them), optional Adam moments and statistics of
    matching shapes, every value finite. Errors name the array."""
    if not isinstance(state, dict):
        raise TypeError(f"[splat] state: expected a dict of arrays, got {type(state).__name__}")
    params = ("means", "log_scales", "quats", "opacity_logits", "sh")
    for key in params:
        if key not in state:
            raise ValueError(f"[splat] state: missing array '{key}'")
    g = Gaussians(*(state[k] for k in params))
    if g.sh.shape[1] < sh_coeffs(sh_degree):
        raise ValueError(f"[splat] sh: sh_degree {sh_degree} needs {sh_coeffs(sh_degree)} coefficients per "
                         f"channel, got {g.sh.shape[1]}")
    out = {k: getattr(g, k) for k in params}
    for key, value in state.items():
        if key in out:
            continue
        prefix, _, param = key.partition(".")
        if prefix in ("adam_m", "adam_v") and param in params:
            shape = out[param].shape
        elif key in _STATS or key == "scale_ceiling":
            shape = (len(g),)
        elif key in _EXPOSURE:
            shape = (None, 3, 4)
        else:
            continue  # not part of the native state
        out[key] = as_float32(key, value, shape)
        if key in _EXPOSURE and len(out[key]) == 0:
            raise ValueError(f"[splat] {key}: expected one [3, 4] correction per training view, got none")
        if (prefix == "adam_v" or key == "grad_count") and np.any(out[key] < 0):
            raise ValueError(f"[splat] {key}: must not be negative")
    for param in params:
        if (f"adam_m.{param}" in out) != (f"adam_v.{param}" in out):
            raise ValueError(f"[splat] state: adam_m.{param} and adam_v.{param} come together")
    return out
