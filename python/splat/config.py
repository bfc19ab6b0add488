"""Run configuration: TOML files <-> dataclasses, validated in one pass.

A config file has up to four tables::

    [data]      where the scene is and how to load it          (DataConfig)
    [train]     the training recipe, 3DGS defaults              (TrainConfig)
    [backend]   native backend switches                          (splat.BackendConfig)
    [output]    run folder, checkpoints, evaluation, exports    (OutputConfig)

`check_config` returns every problem at once, each line starting with the
`section.key` it concerns; `load_config` raises `ConfigError` carrying the
same list. Relative `data.path` / `data.eval_path` are resolved against the
directory of the config file; `output.dir` stays relative to the working
directory of the run.
"""
from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

from ._config_fields import ConfigError, _Section, _f, _printable, _type_name
from ._validate import UINT32_MAX

try:  # Python 3.11+
    import tomllib as _toml
except ModuleNotFoundError:  # pragma: no cover - Python 3.10 (pyproject depends on tomli there)
    import tomli as _toml

__all__ = ["Config", "ConfigError", "DataConfig", "OutputConfig", "TrainConfig", "apply_overrides",
           "check_config", "load_config", "SECTIONS"]


# The native trainer's cap on the number of Gaussians (TrainSettings::max_gaussians).
MAX_GAUSSIANS = 1 << 24


# Where a pixel's blend stops ([train] blend_stop; Rasterizer.forward's blend_stop).
BLEND_STOPS = ("splat", "chunk")


# Recipe presets: the [train] values each one gives the keys a config leaves out.
# fast: 3DGS's schedule compressed to 6000 steps (densification until 3000 at a
# lower gradient threshold, the SH degree raised every 300 steps, the learning
# rates decaying over the shorter run) and no opacity reset (its first would
# fall at 6000, after densification): in a run this short a reset's recovery
# costs more than it prunes. Every rate but the means' decays to a tenth once the count is
# settled (lr_final_fraction; from densify_until, or mcmc_refine_until for a random start):
# one H100, bench/fast.py, four seeds a recipe in one call, the same training time: thermos
# 34.77 -> 34.87 dB (gsplat's 34.75 met by 3 -> 4 seeds of 4, in 4.5 s), lego_400 34.62 ->
# 34.71 (every seed, 4.1 s), beer 23.31 -> 23.31 (std 0.77 -> 0.53); room (three seeds,
# another call) 19.24 -> 19.41 in 7.7 s. Chosen by measurement (README: the fast preset).
PRESETS: dict[str, dict] = {
    "default": {},
    "fast": {"steps": 6000, "densify_from": 300, "densify_until": 3000, "densify_grad_threshold": 1.5e-4,
             "opacity_reset_every": 6000, "sh_degree_interval": 300, "lr_final_fraction": 0.1},
}

# What a preset gives, over PRESETS, a scene that starts from random points (no point
# cloud: a Blender scene). fast: MCMC with a budget of 250k Gaussians in 5000 steps,
# growing 10% a refine: relocation moves the random start's dead Gaussians onto the
# object, where clone / split must first grow them (lego_400: 34.61 dB in 4.9 s against
# the capture recipe's 33.13 in 4.0 s; on thermos, from SfM points, MCMC was slower and
# no better). default: prune the half of the Gaussians with the least blend weight when
# densification ends (prune_low_weight; one H100, each paired with the unpruned run from
# the same state): lego_800 36.7 -> 30.6 s at 37.59 -> 37.58 dB (8 views a step: 28.3 ->
# 23.1 s, 37.50 -> 37.45), lego_400 25.0 -> 21.0 and 24.4 -> 20.7 s at -0.06 and -0.05 dB;
# and train four views a step where a batch's views train together (batch_views; the
# TrainConfig.for_random_start conditions): the gate on one H100 (bench/gate.py, pruning by
# half in each), lego_400 21.8 s, 35.60 dB at one view a step, 13.2 s, 35.56 at four, 12.1-12.2
# s, 35.44-35.47 at eight; lego_800 25.0 s, 37.49 at four, 24.7 s, 37.45 at eight. Four is
# the size every step the 3DGS schedule names is a multiple of, so no event moves.
# Chosen by measurement (README: the fast preset; pruning by blend weight; several views a step).
PRESETS_RANDOM_START: dict[str, dict] = {
    "default": {"prune_low_weight": 0.5, "batch_views": 4},
    "fast": {"steps": 5000, "strategy": "mcmc", "max_gaussians": 250000, "mcmc_refine_from": 300,
             "mcmc_refine_until": 3750, "mcmc_growth": 0.1},
}

# What a preset gives, over PRESETS, a COLMAP / nerfstudio capture trained with the opacity
# resets its camera layout gets (none for cameras around an object, resets for an open
# scene; splat.schedule.capture_recipe). default: clone / split above a screen-space
# gradient of 0.0006 instead of 0.0002, and only until step 7000 instead of 15000. At the
# 3DGS keys beer grew to 424k Gaussians and room to 3.2M, and beer's test PSNR fell from
# 7000 to 30000 steps. 30000 steps on the H200 at 0.0006 against 0.0004 (the previous
# default) and 0.0002: beer 24.84 dB over 8 seeds (std 0.59, worst 23.54) against 23.93
# (0.71, 22.68) and 21.73; thermos 35.02 (std 0.08) against 35.09 (0.22) and 35.02 (0.20);
# room 20.46 over 4 seeds (std 0.09, 320k Gaussians) against 20.07 (0.25, 570k) and 19.08
# (3.2M). Fewer Gaussians fit these captures better. Chosen by measurement (README: what
# a capture gets by default). fast: its own densification keys,
# and the resolution schedule (a quarter size for 1000 steps, then half for 1000; not with
# exposure = true, which it does not train with): over 3-4 seeds on the H200, thermos 34.82
# dB in 4.9 s against 34.74 in 5.5 s, room 19.47 against 19.30 in 8.0 s, beer 22.27
# against 22.66 (std 0.47) in 5.6 s against 6.1. A Blender scene keeps it off (lego_400
# lost 0.28 dB with it before it got MCMC).
# default also decays every rate but the means' to a tenth of itself once densification
# ends (lr_final_fraction), so the last views' order no longer decides where the fixed
# count of Gaussians ends. One H100, `deterministic = true`, 30000 steps, paired with
# constant rates seed by seed (the two share every bit to step 7000): thermos +0.19 dB (se
# 0.02; each of four seeds +0.14 to +0.25, 35.00 -> 35.15, std 0.09 -> 0.06), room +0.09
# (se 0.04; each of four seeds +0.03 to +0.20, 20.40 -> 20.49, std 0.16 -> 0.10), beer
# -0.03 (se 0.06; four seeds, 24.31 -> 24.29) with every seed's 30000-step result within
# 0.1 dB of its 7000-step one (constant rates: seed 0 lost 0.16). Chosen by measurement
# (README: what a capture gets by default; docs/training_modes.md, "The last iterate's
# noise"). The fast preset has its own (PRESETS).
# default also prunes, without resets (a capture of an object), what a training view sees
# larger than the screen-pruning radius from nearer than 0.3 x the extent (prune_near): the
# faint clusters densification grows right in front of a camera, which took a test view
# down by 6-7 dB in one beer seed in four. One H100, `deterministic = true`, four seeds, 30000
# steps, one call: beer 24.29 dB (std 0.30, worst 23.87) -> 24.84 (std 0.07, worst 24.76),
# every seed +0.23 to +0.89; thermos 35.15 (std 0.06) -> 34.99 (std 0.05), every seed -0.08
# to -0.28. At 0.2 x the extent: beer 24.56 (std 0.26), thermos 35.05. With float atomics,
# eight seeds: beer 24.69 (std 0.20), thermos 35.00 (std 0.03). The fast preset leaves it
# out: it would take thermos' fast run under 34.75 (34.85 -> 34.73). An open scene trains
# with resets and their own size pruning, which this key leaves alone (README: what a
# capture gets by default; docs/training_modes.md, "Pruning near the cameras").
PRESETS_CAPTURE: dict[str, dict] = {
    "default": {"densify_grad_threshold": 6e-4, "densify_until": 7000, "lr_final_fraction": 0.1,
                "prune_near": 0.3},
    "fast": {"num_downscales": 2, "resolution_schedule": 1000},
}

# Preset keys that train with exposure = false only (TrainConfig's cross-check).
SCHEDULE_KEYS = ("num_downscales", "resolution_schedule")


# --------------------------------------------------------------------------- sections


@dataclass(init=False)
class DataConfig(_Section):
    """[data]: the scene folder and how to load it (see splat.load_dataset)."""

    SECTION: ClassVar[str] = "data"
    path: str | None = _f(None, "optpath",
                          doc="scene folder (Blender, nerfstudio or COLMAP); relative to the config file")
    format: str = _f("auto", "str", choices=("auto", "blender", "nerfstudio", "colmap"), doc="dataset format")
    train_split: str = _f("train", "str", choices=("train", "val", "test", "all"), doc="split trained on")
    eval_split: str = _f("test", "str", choices=("train", "val", "test", "all"), doc="split evaluated on")
    downscale: int = _f(1, "int", lo=1, doc="integer image downscale (box average)")
    background: tuple | None = _f(None, "optcolor",
                                  doc="RGB background images are composited on and rendered over "
                                      "(unset: white for Blender scenes, black for captures)")
    alpha: str = _f("composite", "str", choices=("composite", "mask"),
                    doc="RGBA images: composite on the background, or leave transparent pixels "
                        "(alpha < 0.5) out of the loss as a mask")
    test_every: int = _f(8, "int", lo=2, doc="COLMAP: every n-th image (sorted by name) is held out for test")
    train_frames: Any = _f(None, "frames", doc="subset of the train split: 'start:stop:step' or index list")
    test_frames: Any = _f(None, "frames", doc="subset of the eval split: 'start:stop:step' or index list")
    eval_path: str | None = _f(None, "optpath", doc="scene folder for evaluation if not `path`")
    eval_supersample: int = _f(1, "int", lo=1, hi=16,
                               doc="render eval views at this multiple of the eval image size, "
                                   "then box-average down")
    device_image_budget: float = _f(0.0, "float", lo=0.0,
                                    doc="GiB of device memory the training images may take before they "
                                        "are streamed from host memory a view a step ahead (0: half the "
                                        "free device memory; the cpu backend streams only when set)")
    eval_masked: bool = _f(False, "bool", doc="evaluation leaves out the pixels the eval views' masks exclude "
                                              "(PSNR over the valid pixels, SSIM's map averaged over them)")
    eval_lpips: str = _f("none", "str", choices=("none", "alex", "vgg"),
                         doc="also LPIPS with this backbone at every evaluation (needs splat-gs[lpips] "
                             "and the backbone's weights on this machine; README, Metrics)")
    allow_outside_paths: bool = _f(False, "bool",
                                   doc="let the dataset's files (image names, file_path, mask_path, "
                                       "ply_file_path, ...) name files outside the scene folder: absolute "
                                       "paths or ones whose normalised form leaves it (refused by default)")

    @classmethod
    def _cross_check(cls, v, bad):
        errors = []
        if bad & {"format", "train_split", "eval_split"}:
            return errors
        if v["format"] == "colmap":
            for key in ("train_split", "eval_split"):
                if v[key] == "val":
                    errors.append(f"data.{key}: COLMAP scenes have no 'val' split (use train, test or all)")
        if v["format"] == "blender":
            for key in ("train_split", "eval_split"):
                if v[key] == "all":
                    errors.append(f"data.{key}: Blender scenes have splits train, val, test")
        return errors

    def loader_args(self) -> dict:
        """The keyword arguments of splat.load_dataset these settings give (all but
        the path, split and frames)."""
        return dict(background=None if self.background is None else tuple(self.background),
                    downscale=self.downscale, test_every=self.test_every, format=self.format,
                    alpha=self.alpha, allow_outside_paths=self.allow_outside_paths)


@dataclass(init=False)
class TrainConfig(_Section):
    """[train]: the optimisation recipe; defaults are those of 3D Gaussian Splatting."""

    SECTION: ClassVar[str] = "train"
    preset: str = _f("default", "str", choices=tuple(PRESETS),
                     doc="the recipe's starting values: default = 3D Gaussian Splatting's 30000 steps; fast = "
                         "a compressed schedule that reaches the default's quality in a fraction of the time, "
                         "with MCMC for a scene that starts from random points and a resolution schedule for a "
                         "capture (README: the fast preset). "
                         "Keys set explicitly win over the preset's")
    steps: int = _f(30000, "int", lo=1, hi=UINT32_MAX, doc="optimisation steps")
    # Adam learning rates per parameter group
    means_lr: float = _f(1.6e-4, "float", lo=0.0, doc="initial means lr, times the scene extent")
    means_lr_final: float = _f(1.6e-6, "float", lo=0.0,
                               doc="final means lr (exponential decay over `steps`), times the scene extent")
    log_scales_lr: float = _f(5e-3, "float", lo=0.0, doc="log-scales lr")
    quats_lr: float = _f(1e-3, "float", lo=0.0, doc="quaternion lr")
    opacity_lr: float = _f(5e-2, "float", lo=0.0, doc="opacity-logit lr")
    sh_dc_lr: float = _f(2.5e-3, "float", lo=0.0, doc="SH degree-0 lr")
    sh_rest_lr: float = _f(2.5e-3 / 20.0, "float", lo=0.0, doc="SH higher-degree lr")
    lr_final_fraction: float = _f(1.0, "float", lo=0.0, lo_open=True, hi=1.0,
                                  doc="the fraction of the other rates (scales, rotations, opacities, SH) left at "
                                      "the last step: they hold until the Gaussian count is settled "
                                      "(densify_until; MCMC: mcmc_refine_until), then decay log-linearly to it "
                                      "(1: constant, the 3DGS recipe)")
    opacity_reg: float = _f(0.0, "float", lo=0.0,
                            doc="weight of mean(opacity) in the loss, from step reg_from on (the default "
                                "strategy; mcmc: mcmc_opacity_reg)")
    scale_reg: float = _f(0.0, "float", lo=0.0,
                          doc="weight of mean(scale) in the loss, from step reg_from on (the default strategy; "
                              "mcmc: mcmc_scale_reg)")
    reg_from: int = _f(0, "int", lo=0, hi=UINT32_MAX,
                       doc="the step from which opacity_reg and scale_reg apply (0: every step)")
    adam_eps: float = _f(1e-15, "float", lo=0.0, lo_open=True, doc="Adam epsilon")
    adam_beta1: float = _f(0.9, "float", lo=0.0, hi=1.0, hi_open=True, doc="Adam beta1")
    adam_beta2: float = _f(0.999, "float", lo=0.0, hi=1.0, hi_open=True, doc="Adam beta2")
    # spherical harmonics
    sh_degree: int = _f(3, "int", lo=0, hi=3, doc="final SH degree")
    sh_degree_interval: int = _f(1000, "int", lo=1, hi=UINT32_MAX,
                                 doc="raise the active SH degree every this many steps")
    # densification
    densify_from: int = _f(500, "int", lo=0, hi=UINT32_MAX, doc="first densification step")
    densify_until: int = _f(15000, "int", lo=0, hi=UINT32_MAX, doc="last densification step")
    cap_scale_growth: float = _f(0.0, "float", lo=0.0,
                                 doc="0: off; else from densify_until on no Gaussian's scale grows past this many "
                                     "times its largest at that step (1: no growth; the default strategy only)")
    prune_low_weight: float = _f(0.0, "float", lo=0.0, hi=1.0, hi_open=True,
                                 doc="0: off; else at densify_until prune this fraction of the Gaussians, those "
                                     "with the least blend weight (alpha T summed over every training view's "
                                     "pixels; the default strategy only)")
    densify_every: int = _f(100, "int", lo=1, hi=UINT32_MAX, doc="densify every this many steps")
    densify_grad_threshold: float = _f(2e-4, "float", lo=0.0, lo_open=True,
                                       doc="mean screen-space gradient norm that triggers clone/split")
    percent_dense: float = _f(0.01, "float", lo=0.0, hi=1.0, lo_open=True,
                              doc="clone if max scale <= this times the extent, else split")
    split_count: int = _f(2, "int", lo=2, hi=256, doc="Gaussians a split produces (at most 256: the native limit)")
    split_scale_divisor: float = _f(1.6, "float", lo=0.0, lo_open=True,
                                    doc="scales of split Gaussians are divided by this")
    prune_opacity: float = _f(0.005, "float", lo=0.0, hi=1.0, hi_open=True,
                              doc="prune Gaussians with opacity below this")
    prune_max_screen_radius: float = _f(0.0, "float", lo=0.0,
                                        doc="prune screen radius above this (pixels; after the first opacity "
                                            "reset; 0 = off). With prune_screen_fraction the smaller one applies")
    prune_screen: str = _f("auto", "str", choices=("auto", "on", "off"),
                           doc="screen-size pruning at prune_screen_fraction: auto = on for a capture whose "
                               "cameras look at an object (their axes meet in front of them), off for an open "
                               "scene such as a room seen from inside (README: defaults by measurement)")
    prune_screen_fraction: float = _f(0.15, "float", lo=0.0, hi=1.0,
                                      doc="with prune_screen on: prune screen radius above this fraction of the "
                                          "larger image side (after the first opacity reset, while densifying; "
                                          "without resets, near the cameras only: prune_near). "
                                          "It removes the low-opacity clusters that grow right in front of a camera")
    prune_near: float = _f(0.0, "float", lo=0.0,
                           doc="0: off; else, with no opacity resets, the screen-size pruning (prune_screen, "
                               "prune_screen_fraction) runs at every densification, for a Gaussian whose size says "
                               "the view that saw it that large was nearer than this times the extent (a capture "
                               "of an object gets 0.3: README, defaults by measurement)")
    prune_max_world_scale: float = _f(0.1, "float", lo=0.0, lo_open=True,
                                      doc="prune max scale above this times the extent (after the first opacity reset)")
    opacity_reset: str = _f("auto", "str", choices=("auto", "on", "off"),
                            doc="opacity resets (and the world- and screen-size pruning that starts after the "
                                "first): auto = off for a capture (COLMAP, nerfstudio) whose cameras look at an "
                                "object, on for an open capture or a Blender scene (README: defaults by measurement)")
    opacity_reset_every: int = _f(3000, "int", lo=1, hi=UINT32_MAX, doc="reset opacities every this many steps")
    opacity_reset_value: float = _f(0.01, "float", lo=0.0, hi=1.0, lo_open=True, hi_open=True,
                                    doc="opacity ceiling applied at a reset")
    # initialisation
    init_points: int = _f(100000, "int", lo=1, hi=MAX_GAUSSIANS,
                          doc="random points when the scene has no point cloud (at most the native "
                              "cap on Gaussians, 2^24)")
    init_extent: float = _f(1.3, "float", lo=0.0, lo_open=True, doc="random points in [-e, e]^3")
    init_opacity: float = _f(0.1, "float", lo=0.0, hi=1.0, lo_open=True, hi_open=True,
                             doc="initial opacity")
    # loss and randomness
    ssim_weight: float = _f(0.2, "float", lo=0.0, hi=1.0, doc="loss = (1-w) L1 + w (1 - SSIM)")
    seed: int = _f(0, "int", lo=0, hi=2**63 - 1, doc="random seed")
    random_background: bool = _f(False, "bool", doc="random background colour per step")
    # rasterization mode
    antialiased: bool = _f(False, "bool",
                           doc="mip-splatting 2D filter: opacity x sqrt(det(cov2d) / det(cov2d + 0.3 I)), "
                               "as gsplat's rasterize_mode='antialiased'; renders of the run use it too")
    # densification strategy and the Gaussian budget
    strategy: str = _f("default", "str", choices=("default", "mcmc"),
                       doc="default: 3DGS clone / split / prune and opacity resets; mcmc: 3DGS as Markov chain "
                           "Monte Carlo (relocation of dead Gaussians, growth by mcmc_growth up to max_gaussians, "
                           "position noise, opacity and scale regularisers)")
    max_gaussians: int = _f(MAX_GAUSSIANS, "int", lo=1, hi=MAX_GAUSSIANS,
                            doc="most Gaussians training may reach (both strategies; the native cap, 2^24)")
    mcmc_refine_from: int = _f(500, "int", lo=0, hi=UINT32_MAX, doc="mcmc: refine (relocate, grow) after this step")
    mcmc_refine_until: int = _f(25000, "int", lo=0, hi=UINT32_MAX, doc="mcmc: refine before this step")
    mcmc_refine_every: int = _f(100, "int", lo=1, hi=UINT32_MAX, doc="mcmc: refine every this many steps")
    mcmc_growth: float = _f(0.05, "float", lo=0.0, hi=1.0,
                            doc="mcmc: a refine adds this fraction of the count (up to max_gaussians)")
    mcmc_min_opacity: float = _f(0.005, "float", lo=0.0, hi=1.0, hi_open=True,
                                 doc="mcmc: Gaussians at or below this opacity are dead and relocated")
    mcmc_noise_lr: float = _f(5e5, "float", lo=0.0,
                              doc="mcmc: position noise, times the means' learning rate")
    mcmc_opacity_reg: float = _f(0.01, "float", lo=0.0, doc="mcmc: weight of mean(opacity) in the loss")
    mcmc_scale_reg: float = _f(0.01, "float", lo=0.0, doc="mcmc: weight of mean(scale) in the loss")
    mcmc_init_opacity: float = _f(0.5, "float", lo=0.0, hi=1.0, lo_open=True, hi_open=True,
                                  doc="mcmc: initial opacity (instead of init_opacity)")
    mcmc_init_scale: float = _f(0.1, "float", lo=0.0, lo_open=True,
                                doc="mcmc: initial scales, times the 3DGS initialisation's (nearest-point distance)")
    # absgrad densification and exposure compensation
    absgrad: bool = _f(False, "bool", doc="densify on the summed absolute per-pixel screen-space gradient "
                                           "(AbsGS; gsplat's absgrad=True)")
    absgrad_grad_threshold: float = _f(8e-4, "float", lo=0.0, lo_open=True,
                                       doc="mean absolute screen-space gradient norm that triggers clone/split "
                                           "(with absgrad; replaces densify_grad_threshold)")
    exposure: bool = _f(False, "bool", doc="learn a per-training-image affine colour correction (3x3 + bias) "
                                            "applied to the render before the loss (training only)")
    exposure_lr: float = _f(1e-2, "float", lo=0.0, doc="initial exposure-correction lr")
    exposure_lr_final: float = _f(1e-3, "float", lo=0.0,
                                  doc="final exposure-correction lr (exponential decay over `steps`)")
    visible_adam: bool = _f(False, "bool", doc="Adam steps only the Gaussians the step's view saw; the others keep "
                                                "their parameters and moments (gsplat's visible_adam, Taming 3DGS)")
    blend_stop: str = _f("chunk", "str", choices=BLEND_STOPS,
                         doc="where a pixel's blend stops in training and in the run's renders: chunk applies the "
                             "3DGS stop (before the splat that would take the transmittance below 1e-4) within "
                             "each 256-entry chunk of a tile's list, from the chunk's start, and ends the pixel "
                             "after the first chunk that leaves its transmittance below 1e-4 (no walk or "
                             "checkpoint pass on a GPU: lego_400 trains 15% faster, same PSNR); splat is the 3DGS "
                             "rule itself, as the reference and gsplat stop")
    adam_moments: str = _f("bfloat16", "str", choices=("float32", "bfloat16"),
                           doc="storage of Adam's two moments per parameter: bfloat16 packs both in 4 bytes, rounded "
                               "stochastically (half the moments' memory and traffic; the update itself in float32)")
    num_downscales: int = _f(0, "int", lo=0, hi=4,
                             doc="resolution schedule: the first steps train on the views at 1/2^num_downscales "
                                 "of their size (box-filtered), the factor halving every resolution_schedule steps "
                                 "(nerfstudio's splatfacto; 0: full size throughout)")
    resolution_schedule: int = _f(3000, "int", lo=1, hi=UINT32_MAX,
                                  doc="steps at each resolution level of the schedule (with num_downscales > 0)")
    batch_views: int = _f(1, "int", lo=1, hi=64,
                          doc="views a training step averages: each step is one update over this many consecutive "
                              "views, their gradients' mean, the learning rates times sqrt(batch_views) and Adam's "
                              "betas to the power batch_views (gsplat's batch_size; the data-parallel batch in one "
                              "process); steps, and every step the schedule names, still count views")

    def for_random_start(self) -> "TrainConfig":
        """This recipe for a scene that starts from random points (no point cloud): its
        preset's keys for such a scene (PRESETS_RANDOM_START) where this config leaves
        them to the preset, i.e. neither sets them explicitly nor changed them since;
        itself when the preset has none, or when this config chooses the strategy
        (the keys are one MCMC recipe)."""
        extra = PRESETS_RANDOM_START.get(self.preset)
        if not extra:
            return self
        if "strategy" in extra and "strategy" in self.kept_keys():
            return self
        if "batch_views" in extra and not self.trains_views_together():
            extra = {k: v for k, v in extra.items() if k != "batch_views"}
        return self.with_preset_keys(extra)

    def trains_views_together(self) -> bool:
        """Whether the views of a batch (batch_views > 1) can be rasterized together in
        this recipe, which is what a batch gains time by: the default strategy (the one
        measured), no absgrad nor random background (their views go one after another),
        neither exposure nor visible_adam (no batches yet)."""
        return not (self.strategy != "default" or self.absgrad or self.random_background or self.exposure
                    or self.visible_adam)

    def one_view_a_rank(self) -> "TrainConfig":
        """This recipe for data-parallel ranks, which make the batch with a view each:
        batch_views = 1 where the preset gave more (set explicitly, more stays an error)."""
        given = getattr(self, "_given", None)
        if given is None or "batch_views" in given:
            return self
        out = TrainConfig(**{**{f.name: getattr(self, f.name) for f in fields(self)}, "batch_views": 1})
        out._given = frozenset(given | {"batch_views"})   # so that no preset gives it again
        return out

    def kept_keys(self) -> dict:
        """The keys this config does not leave to its preset, with their values: set
        explicitly, or changed since (every key of a config built without the record).
        A preset's keys apply only to the others (with_preset_keys)."""
        base = TrainConfig(preset=self.preset)
        given = getattr(self, "_given", None)
        return {f.name: getattr(self, f.name) for f in fields(self)
                if given is None or f.name in given or getattr(self, f.name) != getattr(base, f.name)}

    def with_preset_keys(self, extra: dict) -> "TrainConfig":
        """This config with `extra`'s values for the keys it leaves to the preset
        (for_random_start, splat.schedule.capture_recipe)."""
        kept = self.kept_keys()
        out = TrainConfig(**{**extra, **kept})
        out._given = frozenset(kept)   # so that a second call changes nothing
        return out

    @classmethod
    def _collect_bad(cls, kwargs: dict):
        # A preset supplies the keys the caller leaves out; a bad preset name is
        # reported by the field's own check.
        preset = kwargs.get("preset", "default")
        values = PRESETS.get(preset, {}) if isinstance(preset, str) else {}
        return super()._collect_bad({**values, **kwargs})

    @classmethod
    def _cross_check(cls, v, bad):
        errors = []
        if not bad & {"densify_from", "densify_until"} and v["densify_from"] > v["densify_until"]:
            errors.append(f"train.densify_from: {v['densify_from']} is after train.densify_until "
                          f"{v['densify_until']}")
        if not bad & {"mcmc_refine_from", "mcmc_refine_until"} and v["mcmc_refine_from"] > v["mcmc_refine_until"]:
            errors.append(f"train.mcmc_refine_from: {v['mcmc_refine_from']} is after train.mcmc_refine_until "
                          f"{v['mcmc_refine_until']}")
        if not bad & {"strategy", "absgrad"} and v["strategy"] == "mcmc" and v["absgrad"]:
            errors.append("train.absgrad: the mcmc strategy does not densify on screen-space gradients; "
                          "absgrad applies only to strategy = 'default'")
        if "cap_scale_growth" not in bad and 0.0 < v["cap_scale_growth"] < 1.0:
            errors.append(f"train.cap_scale_growth: {v['cap_scale_growth']:g} would shrink every Gaussian when "
                          "densification stops: 0 (off) or at least 1")
        if not bad & {"num_downscales", "exposure"} and v["num_downscales"] > 0 and v["exposure"]:
            errors.append("train.num_downscales: the resolution schedule does not train with exposure = true "
                          "(a view's colour correction is fitted at one image size); set one of them")
        for key in ("exposure", "visible_adam"):
            if not bad & {"batch_views", key} and v["batch_views"] > 1 and v[key]:
                errors.append(f"train.batch_views: {v['batch_views']} views a step do not train with {key} = true "
                              f"yet; set batch_views = 1 or {key} = false")
        if not bad & {"opacity_reset_value", "prune_opacity"} and \
                v["opacity_reset_value"] <= v["prune_opacity"]:
            errors.append(f"train.opacity_reset_value: {v['opacity_reset_value']} must exceed "
                          f"train.prune_opacity {v['prune_opacity']} (a reset would prune everything)")
        return errors


@dataclass(init=False)
class OutputConfig(_Section):
    """[output]: where results go and when they are produced."""

    SECTION: ClassVar[str] = "output"
    dir: str = _f("runs/default", "str", doc="run folder (relative to the working directory)")
    checkpoint_steps: list = _f([], "ints", lo=1, doc="steps after which a checkpoint is written")
    eval_steps: list = _f([7000, 30000], "ints", lo=1,
                          doc="steps after which the eval split is evaluated (past train.steps: ignored)")
    render_views: int = _f(4, "int", lo=0, doc="eval views saved as images at each evaluation")
    save_ply: bool = _f(True, "bool", doc="write the final Gaussians as a 3DGS PLY")

    @classmethod
    def _cross_check(cls, v, bad):
        if "dir" not in bad and not v["dir"]:
            return ["output.dir: must not be empty"]
        return []


SECTIONS = {"data": DataConfig, "train": TrainConfig, "output": OutputConfig}
_ALL_SECTIONS = ("data", "train", "backend", "output")


@dataclass
class Config:
    """A whole run configuration. `backend` is the raw [backend] table."""

    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    backend: dict = field(default_factory=dict)
    output: OutputConfig = field(default_factory=OutputConfig)
    source: str | None = field(default=None, compare=False)

    def to_dict(self) -> dict:
        return {"data": self.data.to_dict(), "train": self.train.to_dict(),
                "backend": dict(self.backend), "output": self.output.to_dict()}

    def to_toml(self) -> str:
        """The config as TOML text (None values are left out); load_config reads it back."""
        lines = []
        for sec, table in self.to_dict().items():
            lines.append(f"[{sec}]")
            for k, v in table.items():
                if v is not None:
                    lines.append(f"{k} = {_toml_value(v)}")
            lines.append("")
        return "\n".join(lines)

    def backend_config(self):
        """splat.BackendConfig built from the [backend] table (needs the native module)."""
        from . import BackendConfig
        return BackendConfig(**self.backend)

    @classmethod
    def from_dict(cls, raw: dict, *, base_dir=None, check_paths: bool = False) -> "Config":
        """Build from a dict shaped like the TOML file; raises ConfigError listing all problems."""
        cfg, errors = _build(raw, base_dir, check_paths)
        if errors:
            raise ConfigError(errors)
        return cfg


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"[splat] cannot write {type(v).__name__} to TOML")


# --------------------------------------------------------------------------- loading / checking


def _read_toml(path: Path) -> tuple[dict | None, list[str]]:
    try:
        with open(path, "rb") as f:
            return _toml.load(f), []
    except FileNotFoundError:
        return None, [f"{path}: config file not found"]
    except OSError as exc:
        return None, [f"{path}: cannot read config file ({exc.strerror})"]
    except _toml.TOMLDecodeError as exc:
        return None, [f"{path}: invalid TOML ({exc})"]
    except UnicodeDecodeError as exc:
        return None, [f"{path}: invalid TOML ({exc})"]


def _resolve(base_dir: Path | None, p: str | None) -> str | None:
    if p is None:
        return None
    q = Path(os.path.expanduser(p))
    if not q.is_absolute() and base_dir is not None:
        q = Path(base_dir) / q
    return os.path.normpath(str(q))


def _check_data_paths(d: DataConfig) -> list[str]:
    """Does the scene exist, and does it have the splits asked for?"""
    from .data.colmap import find_sparse_dir
    errors = []
    if d.path is None:
        return ["data.path: missing (the scene folder to train on)"]

    def check(root: str, key: str, splits: list[tuple[str, str]]):
        p = Path(root)
        if not p.is_dir():
            from .data import scene_folder_hint
            errors.append(f"data.{key}: {root} is not an existing folder{scene_folder_hint(p)}")
            return
        has_colmap = find_sparse_dir(p) is not None
        blender = d.format == "blender" or (d.format == "auto" and any(
            (p / f"transforms_{s}.json").is_file() for _, s in splits))
        nerfstudio = d.format == "nerfstudio" or (d.format == "auto" and (p / "transforms.json").is_file())
        if nerfstudio and not blender:
            if not (p / "transforms.json").is_file():
                errors.append(f"data.{key}: {p / 'transforms.json'} not found")
        elif blender:
            for split_key, s in splits:
                if not (p / f"transforms_{s}.json").is_file():
                    errors.append(f"data.{split_key}: {p / f'transforms_{s}.json'} not found")
        elif has_colmap:
            for split_key, s in splits:
                if s == "val":
                    errors.append(f"data.{split_key}: COLMAP scenes have no 'val' split")
        elif d.format == "colmap":
            errors.append(f"data.{key}: no COLMAP model in {root} (looked for sparse/0 and sparse)")
        else:
            wanted = ", ".join(f"transforms_{s}.json" for _, s in splits)
            errors.append(f"data.{key}: {root} has neither {wanted} (Blender), transforms.json "
                          f"(nerfstudio) nor sparse/0 (COLMAP)")

    if d.eval_path is None or os.path.abspath(d.eval_path) == os.path.abspath(d.path):
        check(d.path, "path", [("train_split", d.train_split), ("eval_split", d.eval_split)])
    else:
        check(d.path, "path", [("train_split", d.train_split)])
        check(d.eval_path, "eval_path", [("eval_split", d.eval_split)])
    return errors


def _strip_prefix(msg: str, key: str) -> str:
    msg = msg.strip().splitlines()[0] if msg.strip() else msg
    if msg.startswith("["):
        end = msg.find("] ")
        if end > 0:
            msg = msg[end + 2:]
    for p in (f"{key}: ", f"backend.{key}: "):
        if msg.startswith(p):
            msg = msg[len(p):]
    return msg


def _check_backend(table: dict) -> list[str]:
    """Validate [backend] through splat.BackendConfig; skipped when the native module is absent."""
    try:
        from . import BackendConfig  # the native module; may not be built yet
    except ImportError:
        return []
    errors = []
    for k, v in table.items():
        try:
            BackendConfig(**{k: v})
        except (ValueError, TypeError) as exc:
            errors.append(f"backend.{k}: {_strip_prefix(str(exc), k)}")
    if not errors:
        try:
            BackendConfig(**table)
        except (ValueError, TypeError) as exc:
            errors.append(f"backend: {_strip_prefix(str(exc), '')}")
    return errors


def _build(raw, base_dir, check_paths: bool) -> tuple[Config | None, list[str]]:
    errors: list[str] = []
    if not isinstance(raw, dict):
        return None, [f"config: expected a table of sections, got {_type_name(raw)}"]
    for sec, table in raw.items():
        if sec not in _ALL_SECTIONS:
            close = difflib.get_close_matches(str(sec), _ALL_SECTIONS, n=1)
            hint = f" (did you mean [{close[0]}]?)" if close else ""
            errors.append(f"{_printable(sec)}: unknown section{hint}; expected {', '.join(_ALL_SECTIONS)}")
        elif not isinstance(table, dict):
            errors.append(f"{sec}: expected a table, got {_type_name(table)}")
    built = {}
    data_bad: set = set()
    for sec, cls in SECTIONS.items():
        table = raw.get(sec, {})
        if not isinstance(table, dict):
            continue
        values, errs, bad = cls._collect_bad(table)
        errors += errs
        obj = cls.__new__(cls)
        for k, v in values.items():
            setattr(obj, k, v)
        obj._given = frozenset(table)   # as _Section.__init__ records them
        built[sec] = obj
        if sec == "data":
            data_bad = bad
    backend = raw.get("backend", {})
    if isinstance(backend, dict):
        errors += _check_backend(backend)
    if "data" in built and not data_bad & {"path", "eval_path"}:
        d = built["data"]
        d.path = _resolve(base_dir, d.path)
        d.eval_path = _resolve(base_dir, d.eval_path)
        if check_paths and not data_bad & {"format", "train_split", "eval_split"}:
            errors += _check_data_paths(d)
    if errors:
        return None, errors
    return Config(data=built["data"], train=built["train"], backend=dict(backend),
                  output=built["output"]), []


def check_config(config) -> list[str]:
    """Every problem of a config (a TOML path or a dict shaped like one), each
    as 'section.key: message'; an empty list means the config is good.
    Relative data paths of a dict are resolved against the working directory."""
    if isinstance(config, (str, os.PathLike)):
        path = Path(config)
        raw, errors = _read_toml(path)
        if errors:
            return errors
        base = path.resolve().parent
    elif isinstance(config, Config):
        raw, base = config.to_dict(), None
    else:
        raw, base = config, None
    return _build(raw, base, check_paths=True)[1]


def apply_overrides(raw: dict, overrides: dict | None) -> dict:
    """A copy of the TOML-shaped `raw` with `overrides` ({section: {key: value}})
    written over it; the result is validated like a file by the callers."""
    out = {sec: (dict(t) if isinstance(t, dict) else t) for sec, t in raw.items()}
    for sec, table in (overrides or {}).items():
        cur = out.get(sec)
        out[sec] = dict(cur if isinstance(cur, dict) else {}, **table)
    return out


def load_config(path, *, check_paths: bool = True, overrides: dict | None = None) -> Config:
    """Read a TOML config; raises ConfigError listing every problem.
    `check_paths=False` skips checking that the data folders exist;
    `overrides` ({section: {key: value}}) replace values of the file before
    it is checked."""
    path = Path(path)
    raw, errors = _read_toml(path)
    if not errors:
        cfg, errors = _build(apply_overrides(raw, overrides), path.resolve().parent, check_paths)
    if errors:
        raise ConfigError(errors, source=str(path))
    cfg.source = str(path)
    return cfg
