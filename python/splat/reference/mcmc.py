"""The MCMC strategy's refine step, position noise and regularisers in numpy:
the oracle the backends' (shaders/common/mcmc.h) are checked against.

Sampling follows the backends' convention (docs/training_modes.md, "The MCMC
strategy"): weights are opacities in 24-bit fixed point, a sample is the first
Gaussian whose inclusive prefix sum exceeds a point drawn from the
counter-based RNG, so the sampled indices are exact; the opacity and scale
updates are computed in float64 from the paper's formula."""
from __future__ import annotations

import math

import numpy as np

MAX_RATIO = 51
WEIGHT_SCALE = np.float32(16777215.0)
DRAW_RELOCATE, DRAW_GROW, DRAW_NOISE = 0x52000000, 0x47000000, 0x4E000000
_M32 = np.uint64(0xFFFFFFFF)
PARAMS = ("means", "log_scales", "quats", "opacity_logits", "sh")


def hash_u32(x):
    x = np.asarray(x, dtype=np.uint64)
    state = (x * np.uint64(747796405) + np.uint64(2891336453)) & _M32
    word = (((state >> ((state >> np.uint64(28)) + np.uint64(4))) ^ state) * np.uint64(277803737)) & _M32
    return ((word >> np.uint64(22)) ^ word) & _M32


def random_key(seed, step, index, draw):
    h = hash_u32(hash_u32(hash_u32(hash_u32(np.uint64(seed)) ^ np.uint64(step)) ^ np.asarray(index, np.uint64))
                 ^ np.uint64(draw))
    return h


def _uniform(k):
    # As the backends form it: (k >> 8) + 0.5 in float32, which rounds the half away
    # above 2^23 (u near 1, where -log u is small and a float64 u moved it by up to
    # 100%); the division by 2^24 in float64.
    return ((k >> np.uint64(8)).astype(np.float32) + np.float32(0.5)).astype(np.float64) / 16777216.0


def random_normal(ka, kb):
    return np.sqrt(-2 * np.log(_uniform(ka))) * np.cos(2 * np.pi * _uniform(kb))


def opacity(logits):
    """sigmoid in float32, as the backends compute it."""
    x = np.asarray(logits, np.float32)
    return (np.float32(1) / (np.float32(1) + np.exp(-x))).astype(np.float32)


def weights(logits, min_opacity: float, live_only: bool) -> np.ndarray:
    o = opacity(logits)
    w = np.floor(o * WEIGHT_SCALE).astype(np.uint64)
    if live_only:
        w[o <= np.float32(min_opacity)] = 0
    return w


def sample(prefix: np.ndarray, seed: int, step: int, targets: np.ndarray, draw: int) -> np.ndarray:
    """The Gaussian each target samples: floor(u total) for u = 64 random bits /
    2^64 (as the backends form it, from partial products), then the first
    inclusive prefix above that point."""
    total = int(prefix[-1])
    hi = random_key(seed, step, targets, draw).astype(object)
    lo = random_key(seed, step, targets, draw + 1).astype(object)
    c, d = total >> 24, total & 0xFFFFFF
    points = np.array([((int(a) * c) >> 8) + ((int(a) * d) >> 32) + ((int(b) * c) >> 40) for a, b in zip(hi, lo)],
                      dtype=np.uint64)
    return np.searchsorted(prefix, points, side="right")


def relocation(o: np.ndarray, ratio: np.ndarray, min_opacity: float) -> tuple[np.ndarray, np.ndarray]:
    """(new opacity, scale factor) of Gaussians copied ratio - 1 times (float64):
    new = 1 - (1 - o)^(1/ratio), clamped to [min_opacity, 1 - 2^-23], and
    o / sum_{i=1}^{ratio} sum_{k<i} C(i-1, k) (-1)^k new^(k+1) / sqrt(k+1)."""
    o = np.asarray(o, np.float64)
    new = np.clip(1.0 - (1.0 - o) ** (1.0 / ratio), min_opacity, 1.0 - 2.0 ** -23)
    factor = np.empty_like(new)
    for j, (oj, nj, r) in enumerate(zip(o, new, ratio)):
        denom = sum(math.comb(i - 1, k) * (-1) ** k * nj ** (k + 1) / math.sqrt(k + 1)
                    for i in range(1, int(r) + 1) for k in range(i))
        factor[j] = oj / denom
    return new, factor


def _apply(state: dict, sources: np.ndarray, targets: np.ndarray, min_opacity: float) -> None:
    """Targets take their sources' rows with the updated opacity and scale;
    the sources are updated too; moments of both restart at zero."""
    times = np.bincount(sources, minlength=len(state["opacity_logits"]))
    touched = np.nonzero(times)[0]
    ratio = np.minimum(times[touched] + 1, MAX_RATIO)
    new_o, factor = relocation(opacity(state["opacity_logits"][touched]), ratio, min_opacity)
    logit = np.log(new_o / (1 - new_o))
    for name in PARAMS:
        state[name][targets] = state[name][sources]
    upd_logit = np.zeros(len(times))
    upd_shift = np.zeros(len(times))
    upd_logit[touched], upd_shift[touched] = logit, np.log(factor)
    # Targets from their sources' values before the update, then the sources.
    state["opacity_logits"][targets] = upd_logit[sources]
    state["log_scales"][targets] = state["log_scales"][sources] + upd_shift[sources][:, None]
    state["opacity_logits"][touched] = upd_logit[touched]
    state["log_scales"][touched] += upd_shift[touched][:, None]
    for name in PARAMS:
        for m in ("adam_m.", "adam_v."):
            state[m + name][targets] = 0
            state[m + name][touched] = 0


def refine(state: dict, min_opacity: float, add: int, seed: int, step: int,
           weights_given: tuple | None = None) -> tuple[dict, int]:
    """One refine step on a float64 copy of `state` (params and both moments):
    relocation of the dead onto live Gaussians sampled by opacity, then `add`
    new Gaussians sampled by opacity among all. Returns (state, relocated).
    `weights_given`: (relocation weights, growth weights) a backend computed,
    used instead of this module's: a weight is floor(sigmoid * 2^24) and a
    backend's sigmoid may differ from numpy's in the last bit, which shifts the
    prefix sums by a few units (the check of the weights themselves is apart)."""
    s = {k: np.array(v, np.float64) for k, v in state.items()}
    n = len(s["opacity_logits"])
    logits32 = np.asarray(state["opacity_logits"], np.float32)
    dead = np.nonzero(opacity(logits32) <= np.float32(min_opacity))[0]
    w_given = (None, None) if weights_given is None else weights_given
    prefix = np.cumsum(weights(logits32, min_opacity, True) if w_given[0] is None
                       else np.asarray(w_given[0], np.uint64))
    relocated = 0
    if len(dead) and prefix[-1] > 0:
        src = sample(prefix, seed, step, dead, DRAW_RELOCATE)
        _apply(s, src, dead, min_opacity)
        relocated = len(dead)
    if add > 0:
        for k in list(s):
            s[k] = np.concatenate([s[k], np.zeros((add,) + s[k].shape[1:])])
        prefix = np.cumsum(weights(s["opacity_logits"][:n].astype(np.float32), min_opacity, False)
                           if w_given[1] is None else np.asarray(w_given[1], np.uint64))
        targets = np.arange(n, n + add)
        src = sample(prefix, seed, step, targets, DRAW_GROW)
        _apply(s, src, targets, min_opacity)
    return s, relocated


def position_noise(means, log_scales, quats, logits, scale: float, seed: int, step: int) -> np.ndarray:
    """The means after the MCMC noise (float64): Sigma n gate(opacity) scale."""
    n = len(means)
    idx = np.arange(n)
    normal = np.stack([random_normal(random_key(seed, step, idx, DRAW_NOISE + 2 * k),
                                     random_key(seed, step, idx, DRAW_NOISE + 2 * k + 1)) for k in range(3)], 1)
    q = np.asarray(quats, np.float64)
    q = q / np.linalg.norm(q, axis=1, keepdims=True)
    w, x, y, z = q.T
    rot = np.stack([np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
                    np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
                    np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1)], 1)
    s2 = np.exp(2 * np.asarray(log_scales, np.float64))
    cov = np.einsum("nij,nj,nkj->nik", rot, s2, rot)
    o = 1 / (1 + np.exp(-np.asarray(logits, np.float64)))
    gate = 1 / (1 + np.exp(-100 * ((1 - o) - 0.995)))
    return np.asarray(means, np.float64) + np.einsum("nij,nj->ni", cov, normal) * (gate * scale)[:, None]


def regularizer_grads(logits, log_scales, opacity_reg: float, scale_reg: float) -> tuple[np.ndarray, np.ndarray]:
    """Gradients of opacity_reg mean(sigmoid(logits)) + scale_reg mean(exp(log_scales))."""
    o = 1 / (1 + np.exp(-np.asarray(logits, np.float64)))
    ls = np.asarray(log_scales, np.float64)
    return opacity_reg * o * (1 - o) / len(o), scale_reg * np.exp(ls) / ls.size
