"""The training schedule's rules that `splat check` and `splat train` warn
about, without the native module: when opacities are reset, and learning
rates far outside the 3DGS recipe.

The opacity-reset rule is the native schedule's (cpp/core/trainer.cpp,
Trainer::resets_opacity_at); tests hold the two equal.
"""
from __future__ import annotations

from .config import PRESETS_CAPTURE, SCHEDULE_KEYS, TrainConfig

# An Adam step moves a parameter by up to about its learning rate; above this
# per step, a run is all but certain to diverge.
LR_WARN_ABOVE = 1.0
_LR_KEYS = ("means_lr", "means_lr_final", "log_scales_lr", "quats_lr", "opacity_lr", "sh_dc_lr", "sh_rest_lr")


# Dataset formats of real captures (as opposed to Blender / NeRF-synthetic scenes).
CAPTURE_FORMATS = ("colmap", "nerfstudio")


def starts_from_random_points(dataset_format: str | None) -> bool:
    """Whether a dataset of this format (None: unknown) trains from random points:
    a known format other than a capture's, which has no point cloud (Blender)."""
    return dataset_format is not None and dataset_format not in CAPTURE_FORMATS


def opacity_reset_mode(train: TrainConfig, dataset_format: str | None = None, layout: str | None = None) -> str:
    """"on" or "off": whether a run resets opacities and, after the first reset,
    prunes by world and screen size. opacity_reset "on" / "off" as set; "auto" is
    off for a capture (CAPTURE_FORMATS) whose cameras look at an object (layout
    "object", splat.data.layout) and on for any other scene; it stays "auto"
    while the format or, for a capture, the layout is not known (None).
    Measured on the H200 over 2-4 seeds (README, "What a capture gets by
    default"): without resets beer gains 1.4 dB and thermos 0.2, room (an open
    scene) loses 0.7, lego_400 moves by 0.05."""
    if train.opacity_reset != "auto":
        return train.opacity_reset
    return auto_reset_mode(dataset_format, layout)


def auto_reset_mode(dataset_format: str | None, layout: str | None) -> str:
    """What opacity_reset "auto" resolves to for a scene of this format and camera
    layout (opacity_reset_mode): "off", "on", or "auto" while undecided."""
    if dataset_format is None or (dataset_format in CAPTURE_FORMATS and layout is None):
        return "auto"
    return "off" if dataset_format in CAPTURE_FORMATS and layout == "object" else "on"


def capture_keys(train: TrainConfig, dataset_format: str | None, layout: str | None) -> dict:
    """The preset's PRESETS_CAPTURE keys when this recipe trains a capture (CAPTURE_FORMATS)
    of a known camera layout with the opacity resets that layout gets by default (none
    around an object, resets in an open scene: the combinations measured), under the
    default strategy without absgrad (the combinations the keys were measured with); else {}. With
    exposure = true, or num_downscales set to another value, the resolution schedule's
    keys are left out (it does not train with exposure; the two keys are one choice); so is
    prune_near where the scene trains with resets (it acts only without them)."""
    extra = dict(PRESETS_CAPTURE.get(train.preset, {}))
    own = train.kept_keys().get("num_downscales", extra.get("num_downscales"))
    if train.exposure or own != extra.get("num_downscales"):
        extra = {k: v for k, v in extra.items() if k not in SCHEDULE_KEYS}
    if (train.strategy != "default" or train.absgrad or dataset_format not in CAPTURE_FORMATS
            or layout not in ("object", "open")):
        return {}
    mode = opacity_reset_mode(train, dataset_format, layout)
    if mode != auto_reset_mode(dataset_format, layout):
        return {}
    return {k: v for k, v in extra.items() if k != "prune_near"} if mode == "on" else extra


def capture_recipe(train: TrainConfig, dataset_format: str | None, layout: str | None) -> TrainConfig:
    """The recipe a scene of this format and camera layout trains with: capture_keys where
    `train` leaves them to the preset (TrainConfig.with_preset_keys); `train` itself when
    none apply."""
    extra = capture_keys(train, dataset_format, layout)
    return train.with_preset_keys(extra) if extra else train


def opacity_resets_on(train: TrainConfig, dataset_format: str | None = None, layout: str | None = None) -> bool:
    """opacity_reset_mode as a bool; an undecided "auto" counts as on (a dataset
    built in code, which has no format, resets)."""
    return opacity_reset_mode(train, dataset_format, layout) != "off"


def resets_opacity_at(train: TrainConfig, step: int, dataset_format: str | None = None,
                      layout: str | None = None) -> bool:
    """Whether 1-based `step` resets opacities: every opacity_reset_every steps
    while densifying (step < densify_until), never when fewer than
    opacity_reset_every steps of the run remain after it, never with the mcmc
    strategy or with resets off (opacity_resets_on)."""
    if train.strategy == "mcmc" or not opacity_resets_on(train, dataset_format, layout):  # MCMC never resets
        return False
    every = max(1, train.opacity_reset_every)
    return step < train.densify_until and step % every == 0 and step + every <= train.steps


def opacity_reset_steps(train: TrainConfig, dataset_format: str | None = None,
                        layout: str | None = None) -> list[int]:
    """Every step at which the run resets opacities."""
    every = max(1, train.opacity_reset_every)
    return [s for s in range(every, min(train.steps, train.densify_until - 1) + 1, every)
            if resets_opacity_at(train, s, dataset_format, layout)]


def skipped_resets(train: TrainConfig, dataset_format: str | None = None, layout: str | None = None) -> list[int]:
    """Resets the interval alone would place (while densifying) that the rule
    drops because they fall in the last opacity_reset_every steps."""
    if train.strategy == "mcmc" or not opacity_resets_on(train, dataset_format, layout):
        return []
    every = max(1, train.opacity_reset_every)
    return [s for s in range(every, min(train.steps, train.densify_until - 1) + 1, every)
            if not resets_opacity_at(train, s, dataset_format, layout)]


def schedule_warnings(train: TrainConfig, dataset_format: str | None = None, layout: str | None = None) -> list[str]:
    """Warnings (section.key: message) about a recipe that runs but is
    probably not what was meant, on a dataset of this format and camera layout
    (None: unknown)."""
    out = []
    skipped = skipped_resets(train, dataset_format, layout)
    if skipped:
        steps = ", ".join(str(s) for s in skipped)
        out.append(f"train.opacity_reset_every: the opacity reset at step {steps} is skipped: it falls in the "
                   f"last {train.opacity_reset_every} steps of the run (train.steps = {train.steps}), which "
                   f"would end on freshly reset opacities")
    recipe = TrainConfig()
    for key in _LR_KEYS:
        lr = getattr(train, key)
        if lr > LR_WARN_ABOVE:
            out.append(f"train.{key}: {lr:g} is far above the 3DGS recipe's {getattr(recipe, key):g}; "
                       f"training is likely to diverge (it stops at the first non-finite loss or parameter)")
    return out
