"""The training schedule's rules that `splat check` and `splat train` warn
about, without the native module: when opacities are reset, and learning
rates far outside the 3DGS recipe.

The opacity-reset rule is the native schedule's (cpp/core/trainer.cpp,
Trainer::resets_opacity_at); tests hold the two equal.
"""
from __future__ import annotations

from .config import TrainConfig

# An Adam step moves a parameter by up to about its learning rate; above this
# per step, a run is all but certain to diverge.
LR_WARN_ABOVE = 1.0
_LR_KEYS = ("means_lr", "means_lr_final", "log_scales_lr", "quats_lr", "opacity_lr", "sh_dc_lr", "sh_rest_lr")


def resets_opacity_at(train: TrainConfig, step: int) -> bool:
    """Whether 1-based `step` resets opacities: every opacity_reset_every steps
    while densifying (step < densify_until), never when fewer than
    opacity_reset_every steps of the run remain after it, never with the mcmc
    strategy."""
    if train.strategy == "mcmc":  # MCMC never resets opacities
        return False
    every = max(1, train.opacity_reset_every)
    return step < train.densify_until and step % every == 0 and step + every <= train.steps


def opacity_reset_steps(train: TrainConfig) -> list[int]:
    """Every step at which the run resets opacities."""
    every = max(1, train.opacity_reset_every)
    return [s for s in range(every, min(train.steps, train.densify_until - 1) + 1, every)
            if resets_opacity_at(train, s)]


def skipped_resets(train: TrainConfig) -> list[int]:
    """Resets the interval alone would place (while densifying) that the rule
    drops because they fall in the last opacity_reset_every steps."""
    if train.strategy == "mcmc":
        return []
    every = max(1, train.opacity_reset_every)
    return [s for s in range(every, min(train.steps, train.densify_until - 1) + 1, every)
            if not resets_opacity_at(train, s)]


def schedule_warnings(train: TrainConfig) -> list[str]:
    """Warnings (section.key: message) about a recipe that runs but is
    probably not what was meant."""
    out = []
    skipped = skipped_resets(train)
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
