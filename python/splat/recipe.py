"""What a `[train]` recipe does, in words, and the warnings about keys its
modes leave unused: what `splat check` prints about the strategy, the Gaussian
budget, antialiasing, absgrad and exposure compensation. The combinations that
cannot run are errors of TrainConfig itself (config.py, `_cross_check`)."""
from __future__ import annotations

from dataclasses import fields

from .config import PRESETS, PRESETS_RANDOM_START, TrainConfig
from .schedule import capture_keys, opacity_reset_mode, starts_from_random_points

# Keys only the default strategy reads (clone / split / prune, opacity resets, absgrad).
_DEFAULT_ONLY = ("densify_from", "densify_until", "cap_scale_growth", "prune_low_weight", "densify_every",
                 "densify_grad_threshold",
                 "percent_dense", "split_count", "split_scale_divisor", "prune_opacity", "prune_max_screen_radius",
                 "prune_screen", "prune_screen_fraction", "prune_near", "prune_max_world_scale", "opacity_reset",
                 "opacity_reset_every", "opacity_reset_value", "init_opacity", "opacity_reg", "scale_reg",
                 "reg_from")


def _changed(train: TrainConfig, prefix: str = "", keys=None) -> list[str]:
    """Keys (with `prefix`, or among `keys`) whose value differs from the recipe's default."""
    base = TrainConfig(preset=train.preset)   # the preset's values are not changes
    names = [f.name for f in fields(TrainConfig)]
    pick = [k for k in names if (keys is None and k.startswith(prefix)) or (keys is not None and k in keys)]
    return [k for k in pick if getattr(train, k) != getattr(base, k)]


def _keys_text(values: dict) -> str:
    return ", ".join(f"{k} {v}" if isinstance(v, str) else f"{k} {v:g}" for k, v in values.items())


def describe(train: TrainConfig, dataset_format: str | None = None, layout: str | None = None) -> list[str]:
    """One line per mode of the recipe: what it does with these values, on a
    dataset of this format and camera layout (None: unknown; they decide
    opacity_reset = "auto")."""
    budget = f"at most {train.max_gaussians:,} Gaussians"
    preset = []
    if PRESETS.get(train.preset):
        preset = [f"preset: {train.preset}: the keys not set explicitly take {_keys_text(PRESETS[train.preset])}"]
    extra = PRESETS_RANDOM_START.get(train.preset)
    if extra and starts_from_random_points(dataset_format):
        unless = ", unless the strategy is set explicitly" if "strategy" in extra else " where not set explicitly"
        if "batch_views" in extra:
            unless += (" (batch_views where a batch's views train together: the default strategy, without "
                       "absgrad, random_background, exposure or visible_adam, on one process)")
        preset.append(f"preset: {train.preset} on a scene that starts from random points (a {dataset_format} "
                      f"dataset): then {_keys_text(extra)}{unless}")
    extra = capture_keys(train, dataset_format, layout)
    if extra:
        seen = ("cameras around an object, no opacity resets" if layout == "object"
                else "an open scene, opacity resets")
        preset.append(f"preset: {train.preset} on a capture (a {dataset_format} dataset, {seen}): "
                      f"{_keys_text(extra)} where not set explicitly")
    if train.strategy == "mcmc":
        lines = [f"strategy: mcmc: every {train.mcmc_refine_every} steps from {train.mcmc_refine_from} to "
                 f"{train.mcmc_refine_until}, Gaussians of opacity <= {train.mcmc_min_opacity:g} move onto live "
                 f"ones drawn by opacity and {train.mcmc_growth:.0%} more are added, {budget}; position noise "
                 f"every step (noise_lr {train.mcmc_noise_lr:g}); opacity / scale regularisers "
                 f"{train.mcmc_opacity_reg:g} / {train.mcmc_scale_reg:g}; no opacity resets"]
    else:
        when = {"auto": " (for cameras around an object)", "on": "", "off": None}[train.prune_screen]
        mode = opacity_reset_mode(train, dataset_format, layout)
        seen = {"object": ", cameras around an object", "open": ", an open scene"}.get(layout, "")
        why = f" (auto: a {dataset_format} dataset{seen})" if train.opacity_reset == "auto" else ""
        resets = {"auto": f"opacity reset every {train.opacity_reset_every} steps, none for a capture whose cameras "
                          f"look at an object (auto)",
                  "on": f"opacity reset every {train.opacity_reset_every} steps{why}",
                  "off": f"no opacity resets{why}"}[mode]
        if mode == "off":
            when = None
        screen = (f" or, after the first reset, above a screen radius of {train.prune_screen_fraction:.0%} of the "
                  f"larger image side{when}" if when is not None and train.prune_screen_fraction > 0 else "")
        if mode == "off" and train.prune_near > 0 and train.prune_screen != "off" and train.prune_screen_fraction > 0:
            auto = " (for cameras around an object)" if train.prune_screen == "auto" else ""
            screen = (f" or above a screen radius of {train.prune_screen_fraction:.0%} of the larger image side "
                      f"when seen so from nearer than {train.prune_near:g} x the extent{auto}")
        if train.prune_max_screen_radius > 0 and (mode != "off" or train.prune_near > 0):
            screen += f" (at most {train.prune_max_screen_radius:g} px)"
        stat = (f"the summed absolute screen-space gradient (absgrad) above {train.absgrad_grad_threshold:g}"
                if train.absgrad else f"the screen-space gradient above {train.densify_grad_threshold:g}")
        lines = [f"strategy: default: every {train.densify_every} steps from {train.densify_from} to "
                 f"{train.densify_until}, clone / split where {stat}, prune below opacity {train.prune_opacity:g}"
                 f"{screen}, "
                 f"{budget}; {resets}"]
        if train.opacity_reg > 0 or train.scale_reg > 0:
            start = f" from step {train.reg_from}" if train.reg_from > 0 else ""
            lines[0] += f"; opacity / scale regularisers {train.opacity_reg:g} / {train.scale_reg:g}{start}"
        if train.cap_scale_growth > 0:
            grow = ("no Gaussian's scale grows past its largest" if train.cap_scale_growth == 1 else
                    f"no Gaussian's scale grows past {train.cap_scale_growth:g}x its largest")
            lines[0] += f"; from step {train.densify_until} {grow} at that step"
        if train.prune_low_weight > 0:
            lines[0] += (f"; at step {train.densify_until} the {100 * train.prune_low_weight:g}% of Gaussians with "
                         "the least blend weight over the training views pruned")
    lines.append("antialiased: on: the 2D filter's opacity compensation (mip-splatting), in training and in every "
                 "render of the run" if train.antialiased else
                 "antialiased: off: classic 3DGS rasterization (the 0.3-pixel dilation at full opacity)")
    if train.exposure:
        lines.append(f"exposure: on: a learned 3x3 + bias colour correction per training image before the loss "
                     f"(lr {train.exposure_lr:g} -> {train.exposure_lr_final:g}); evaluation leaves it out "
                     f"unless `splat eval --exposure` (training views)")
    if train.num_downscales > 0:
        n, levels = train.resolution_schedule, train.num_downscales
        steps = ", ".join(f"1/{2 ** (levels - k)} to step {n * (k + 1)}" for k in range(levels))
        lines.append(f"resolution schedule: the views box-filtered to {steps}, then full size")
    if train.batch_views > 1:
        b = train.batch_views
        lines.append(f"batch: {b} views a step, one update on their mean gradient (learning rates x {b ** 0.5:.3g}, "
                     f"Adam's betas ^ {b}); steps count views ({-(-train.steps // b)} updates; a batch "
                     f"ends early at each evaluation and checkpoint step)")
    return preset + lines


def mode_warnings(train: TrainConfig, dataset_format: str | None = None, layout: str | None = None) -> list[str]:
    """Warnings (section.key: message) about keys this recipe's modes do not read
    (on a dataset of this format and camera layout; None: unknown)."""
    out = []
    if train.strategy == "mcmc":
        for k in _changed(train, keys=_DEFAULT_ONLY):
            out.append(f"train.{k}: unused with train.strategy = 'mcmc' (its mcmc_* keys apply instead)")
    else:
        for k in _changed(train, prefix="mcmc_"):
            out.append(f"train.{k}: unused with train.strategy = 'default' (set strategy = 'mcmc' to use it)")
        if train.opacity_reg == 0 and train.scale_reg == 0 and "reg_from" in _changed(train):
            out.append("train.reg_from: unused with train.opacity_reg and train.scale_reg at 0")
        if train.absgrad and "densify_grad_threshold" in _changed(train):
            out.append("train.densify_grad_threshold: unused with train.absgrad = true "
                       "(train.absgrad_grad_threshold applies instead)")
        mode = opacity_reset_mode(train, dataset_format, layout)
        if mode == "off":
            why = "'off'" if train.opacity_reset == "off" else f"'auto' on a {dataset_format} dataset"
            # With prune_near the screen-size keys act without resets (near the cameras).
            screen = () if train.prune_near > 0 else ("prune_max_screen_radius",)
            for k in _changed(train, keys=("opacity_reset_every", "opacity_reset_value", "prune_max_world_scale")
                              + screen):
                out.append(f"train.{k}: unused with train.opacity_reset = {why} (no resets, and no size pruning "
                           f"after the first one)")
            if train.prune_screen == "on" and train.prune_near == 0:
                out.append(f"train.prune_screen: 'on' prunes after the first opacity reset, and "
                           f"train.opacity_reset = {why} has none (train.prune_near > 0 prunes near the cameras "
                           f"without resets)")
        elif mode == "on" and train.prune_near > 0:
            out.append("train.prune_near: unused with opacity resets (it prunes near the cameras only in a run "
                       "without them; the resets bring their own size pruning)")
        if not train.absgrad and "absgrad_grad_threshold" in _changed(train):
            out.append("train.absgrad_grad_threshold: unused with train.absgrad = false")
    if train.init_points > train.max_gaussians and starts_from_random_points(dataset_format):
        out.append(f"train.init_points: {train.init_points:,} random points start above train.max_gaussians "
                   f"{train.max_gaussians:,}: training never grows the count, and the start is over the budget")
    if not train.exposure:
        for k in _changed(train, keys=("exposure_lr", "exposure_lr_final")):
            out.append(f"train.{k}: unused with train.exposure = false")
    if train.num_downscales == 0 and "resolution_schedule" in _changed(train):
        out.append("train.resolution_schedule: unused with train.num_downscales = 0 (full size throughout)")
    elif train.num_downscales * train.resolution_schedule >= train.steps:
        out.append(f"train.resolution_schedule: {train.num_downscales} x {train.resolution_schedule} steps reach "
                   f"full size at or after train.steps {train.steps}: the run never trains at full size")
    return out


def recipe_warnings(train: TrainConfig, dataset_format: str | None = None, layout: str | None = None) -> list[str]:
    """Every warning `splat check` and `splat train` give about a recipe on a
    dataset of this format and camera layout (None: unknown): the schedule's
    (splat/schedule.py), then the modes' unused keys."""
    from .schedule import schedule_warnings
    return schedule_warnings(train, dataset_format, layout) + mode_warnings(train, dataset_format, layout)
