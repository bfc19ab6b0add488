"""Helpers of the rasterizer parity tests (test_parity_cpu.py, the GPU suite in
_gpu_suite.py, test_cuda_training.py): splat arrays from a `Scene`, the float64
reference on them, and the closeness checks with their tolerances.

Images agree to IMAGE_TOL except at a tiny fraction of pixels: float32 and
float64 can fall on different sides of a threshold (alpha < 1/255, T < 1e-4,
sigma >= 5.55, a tile-rect boundary), which changes a pixel discretely. At
most FLIP_FRACTION of the pixels (and at least 2) may exceed IMAGE_TOL.
Gradients agree norm-wise to GRAD_TOL per array, for loss gradients that are
zero at those flipped pixels (`loss_gradients`): there the gradient differs
discretely too (a splat at alpha = 1/255 and ~3.3 sigma moves log_scales by
~1e-2 through one pixel, 1.6e-3 of the norm in a 150-splat scene).
"""
import numpy as np

import splat
from splat import reference
from _scenes import random_scene

IMAGE_TOL = 1e-5
FLIP_FRACTION = 0.005
GRAD_TOL = 1e-3
GRADS = ("means", "log_scales", "quats", "opacity_logits", "sh", "means2d")


def to_splat(scene):
    """(splat.Gaussians, splat.Camera) in float32 from a `_scenes.Scene`."""
    f = lambda a: np.ascontiguousarray(a, dtype=np.float32)
    g = splat.Gaussians(f(scene.means), f(scene.log_scales), f(scene.quats), f(scene.opacity_logits), f(scene.sh))
    cam = splat.Camera(f(scene.world_to_camera), scene.fx, scene.fy, scene.cx, scene.cy, scene.width, scene.height)
    return g, cam


def cpu_rasterizer():
    return splat.Rasterizer(splat.BackendConfig(backend="cpu"))


def reference_of(g, cam, degree, bg, blend_stop="splat"):
    return reference.forward(g.means, g.log_scales, g.quats, g.opacity_logits, g.sh, cam.world_to_camera,
                             cam.fx, cam.fy, cam.cx, cam.cy, cam.width, cam.height, degree, bg,
                             blend_stop=blend_stop, tile_cover=binned_tiles if blend_stop == "chunk" else None)


def binned_tiles(means2d, conics, opacities, rects, tiles_x, tiles_y):
    """The tiles binning gives each splat of the reference's projection
    (shaders/common/tile_cover.h through _core.tile_cover_mask): the lists whose
    positions the chunked stop's chunks count."""
    from splat import _core
    f = lambda a: np.ascontiguousarray(a, dtype=np.float32)
    r = np.ascontiguousarray(np.clip(rects[:, [0, 2, 1, 3]], 0, None), dtype=np.int32)
    return _core.tile_cover_mask(f(means2d), f(conics), f(opacities), r, tiles_x, tiles_y)


def deep_scene(rng, n=3000, width=40, height=36):
    """Faint, wide splats over a small image: tile lists of 1500-3000 entries whose
    pixels reach T < 1e-4 only after several 256-entry chunks (the chunked stop's case);
    one splat in 300 opaque, which stops some pixels inside a later chunk."""
    scene = random_scene(rng, n=n, sh_degree=1, width=width, height=height, depth=(2.0, 6.0),
                         pixel_sigma=(4.0, 12.0), logits=(-4.5, -2.5), spread=0.9)
    scene.opacity_logits[::300] = 7.0
    separate_depths(scene)
    return scene


def assert_images_close(got, want, what, seed):
    err = np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64))
    err = err.reshape(err.shape[0], err.shape[1], -1).max(axis=2)
    bad = int(np.count_nonzero(err > IMAGE_TOL))
    allowed = max(2, int(FLIP_FRACTION * err.size))
    assert bad <= allowed, f"{what}: {bad} pixels differ by > {IMAGE_TOL} (max {err.max():.3g}); seed {seed}"


def flipped_pixels(out, *others):
    """Pixels where `out` differs from any of `others` by more than IMAGE_TOL in
    colour or alpha: the discrete flips the image checks allow."""
    bad = np.zeros(out.alpha.shape, bool)
    for o in others:
        bad |= np.abs(np.asarray(out.image, np.float64) - o.image).max(axis=2) > IMAGE_TOL
        bad |= np.abs(np.asarray(out.alpha, np.float64) - o.alpha) > IMAGE_TOL
    return bad


def loss_gradients(rng, out, *others):
    """Random (d_image, d_alpha) in float32, zero at the pixels `out` and `others`
    disagree on (see the module docstring)."""
    d_image = rng.normal(size=out.image.shape).astype(np.float32)
    d_alpha = rng.normal(size=out.alpha.shape).astype(np.float32)
    bad = flipped_pixels(out, *others)
    d_image[bad] = 0.0
    d_alpha[bad] = 0.0
    return d_image, d_alpha


def rel_err(got, want, tiny=1e-12):
    """|got - want| / max(|want|, tiny), Frobenius norms in float64."""
    want = np.asarray(want, np.float64)
    return np.linalg.norm(np.asarray(got, np.float64) - want) / max(np.linalg.norm(want), tiny)


def flipped_rows(got, want, row_tol=1e-4, scale=None):
    """Rows (one per Gaussian) of `got` off `want` by more than row_tol of the row's norm
    plus 1e-3 of the rows' RMS norm (rows near zero sum cancelling terms). scale: rows
    whose norm bounds the terms summed instead of want's (for a signed sum, the sum of
    the terms' absolute values, whose rounding error it bounds)."""
    got = np.asarray(got, np.float64).reshape(len(want), -1)
    want = np.asarray(want, np.float64).reshape(len(want), -1)
    norm = np.linalg.norm(np.asarray(want if scale is None else scale, np.float64).reshape(len(want), -1), axis=1)
    rms = np.sqrt(np.mean(norm ** 2)) if len(norm) else 0.0
    return np.linalg.norm(got - want, axis=1) > row_tol * (norm + 1e-3 * rms)


def assert_rows_close(got, want, what, seed, row_tol=1e-4, total_tol=5e-3, flip_fraction=0.06, scale=None):
    """A training step's per-Gaussian statistics, GPU against CPU, where the loss's gradient
    cannot be zeroed at the flipped pixels (module docstring): every row within row_tol
    (`flipped_rows`; a signed sum against its terms' absolute sum, `scale`) but at most
    max(2, flip_fraction) of them, and the whole within total_tol (Frobenius). A splat whose
    alpha falls within rounding of 1/255 at a pixel lands on either side on the two backends
    (the GPU takes the hardware exp), so its terms there, and those of the splats behind
    it, are on one backend only. Measured on the H200 (absgrad statistic and 2D-mean
    gradients, 250 Gaussians at 96x80, one step, 3000 fresh seeds): 2993 with no row past
    1e-4 and the whole within 1.3e-6 (99th percentile); 7 with a flip, 1-4 rows, the whole
    up to 1.2e-3 (the plain 2D-mean gradient) and 5.9e-4 (the statistic); in 500 more, one
    flip moved 10 rows (4%)."""
    bad = flipped_rows(got, want, row_tol, scale)
    allowed = max(2, int(flip_fraction * len(bad)))
    assert int(bad.sum()) <= allowed, f"{what}: {int(bad.sum())} of {len(bad)} rows off by > {row_tol}; seed {seed}"
    err = rel_err(got, want)
    assert err < total_tol, f"{what}: relative error {err:.3g} over all rows; seed {seed}"


def extra_coeffs(rng, degree):
    """Sometimes store the next degree's coefficients too: they must not matter."""
    return (degree + 2) ** 2 - (degree + 1) ** 2 if degree < 3 and rng.random() < 0.5 else 0


def put_behind_camera(scene, rng, fraction=0.1):
    """Mirror a fraction of the means through the camera plane (t.z -> -t.z)."""
    W = scene.world_to_camera
    t = scene.means @ W[:3, :3].T + W[:3, 3]
    pick = rng.random(len(t)) < fraction
    t[pick, 2] *= -1.0
    scene.means[:] = (t - W[:3, 3]) @ W[:3, :3]
    return int(pick.sum())


def separate_depths(scene, min_gap=1e-5):
    """Push apart camera depths closer than min_gap (relative), moving the later
    splat back along the camera axis. The float64 reference orders depths that
    float32 cannot tell apart (a float32 tie sorts by index): two overlapping
    splats then swap places and the colour differs wherever both contribute
    (tens of pixels by ~1e-3 in a 2500-splat scene, about one seed in 60)."""
    W = scene.world_to_camera
    for _ in range(8):
        z = scene.means @ W[2, :3] + W[2, 3]
        order = np.argsort(z, kind="stable")
        zs = z[order]
        close = np.flatnonzero(np.diff(zs) < min_gap * np.abs(zs[1:]))
        if len(close) == 0:
            return
        later = order[close + 1]
        scene.means[later] += np.outer(2 * min_gap * np.abs(z[later]), W[2, :3])  # W[2, :3] is a unit vector


def scene_for(rng, n, width, height, degree):
    """A random scene of the parity cases: some splats beyond the field-of-view
    clamp, about a tenth behind the camera (n > 1), sometimes extra SH
    coefficients; no two depths within float32's reach of each other."""
    scene = random_scene(rng, n=n, sh_degree=degree, width=width, height=height, extra_sh=extra_coeffs(rng, degree),
                         spread=1.6, depth=(2.0, 6.0), pixel_sigma=(0.5, 6.0))
    if n > 1:
        put_behind_camera(scene, rng)
        separate_depths(scene)
    return scene


def near_plane_scene(rng):
    """Six splats of 1e5-1e6 pixels a hundredth from the camera (a Gaussian of
    scene scale passing by a training camera), where det(cov2d)^2 passes
    float32's range: the scene of the near-plane parity tests."""
    return random_scene(rng, n=6, sh_degree=1, width=40, height=30, depth=(0.0101, 0.02),
                        pixel_sigma=(1e5, 1e6), spread=0.8)
