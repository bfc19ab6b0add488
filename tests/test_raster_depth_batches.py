"""Depth, batched cameras and explicit forward/backward pairing of `splat.Rasterizer`.

The oracle of depth is the float64 reference, whose blend carries z as a fourth
channel (`reference.forward(..., depth=True)`); its gradients are checked against
finite differences here, and against a literal per-pixel loop. splat renders
depth as a second pass whose colour is z (python/splat/_passes.py), so the two
are independent formulations of D = sum_i w_i z_i.
"""
from __future__ import annotations

import numpy as np
import pytest

import splat
from splat import reference
from _parity import (GRAD_TOL, GRADS, assert_images_close, flipped_pixels, rel_err, scene_for, to_splat)
from _scenes import make_rng, random_camera, random_scene
from test_reference import central_differences, compare


def _cpu(**kw):
    return splat.Rasterizer(splat.BackendConfig(backend="cpu"), **kw)


def test_reference_depth_gradients_match_finite_differences():
    rng, seed = make_rng()
    scene = random_scene(rng, n=6, sh_degree=1, width=20, height=18)
    out = reference.forward(*scene.args(), depth=True)
    R1, R2, R3 = (rng.normal(size=s) for s in (out.image.shape, out.alpha.shape, out.depth.shape))
    grads = reference.backward(out, R1, R2, R3)
    base = out.decisions()
    for name in scene.PARAMS:
        def loss(x, name=name):
            o = reference.forward(*scene.replace(**{name: x}).args(), depth=True)
            return np.sum(o.image * R1) + np.sum(o.alpha * R2) + np.sum(o.depth * R3), o.decisions()
        fd, checked = central_differences(loss, getattr(scene, name), base)
        compare(name, getattr(grads, name), fd, checked, f"seed {seed}")


def test_reference_depth_is_the_literal_blend_of_z():
    rng, seed = make_rng()
    scene = random_scene(rng, n=40, sh_degree=0, width=32, height=24)
    out = reference.forward(*scene.args(), depth=True)
    np.testing.assert_allclose(out.image, reference.forward(*scene.args()).image, rtol=0, atol=0)
    z3 = np.repeat(out.depths[:, None], 3, axis=1)
    for _ in range(12):
        i, j = int(rng.integers(scene.width)), int(rng.integers(scene.height))
        rgb, _, _, _ = reference.blend_pixel_literal(out.means2d, out.conics, z3, out.opacities, out.depths,
                                                     out.tile_rects, out.radii > 0, np.zeros(3), i, j)
        assert abs(rgb[0] - out.depth[j, i]) <= 1e-12 * max(1.0, abs(rgb[0])), f"pixel {(i, j)}; seed {seed}"


@pytest.mark.parametrize("n,width,height,degree", [(1, 23, 17, 0), (150, 37, 53, 2), (900, 96, 64, 3)])
def test_depth_matches_reference(n, width, height, degree):
    rng, seed = make_rng()
    g, cam = to_splat(scene_for(rng, n, width, height, degree))
    bg = rng.uniform(0, 1, 3).astype(np.float32)
    r = _cpu()
    out = r.forward(g, cam, degree, bg, depth=True)
    ref = reference.forward(g.means, g.log_scales, g.quats, g.opacity_logits, g.sh, cam.world_to_camera, cam.fx,
                            cam.fy, cam.cx, cam.cy, cam.width, cam.height, degree, bg, depth=True)
    assert out.depth.shape == (height, width)
    assert_images_close(out.image, ref.image, "image", seed)
    # depth is ~z times the colour's weights: compare relative to the depth scale
    scale = float(np.max(ref.depths[ref.radii > 0], initial=1.0))
    assert_images_close(out.depth[..., None] / scale, ref.depth[..., None] / scale, "depth", seed)
    bad = flipped_pixels(out, ref) | (np.abs(out.depth - ref.depth) > 1e-5 * scale)
    d_image = rng.normal(size=out.image.shape).astype(np.float32)
    d_alpha = rng.normal(size=out.alpha.shape).astype(np.float32)
    d_depth = (rng.normal(size=out.depth.shape) / scale).astype(np.float32)
    for a in (d_image, d_alpha, d_depth):
        a[bad] = 0.0
    grads = r.backward(out, d_image, d_alpha, d_depth=d_depth)
    want = reference.backward(ref, d_image, d_alpha, d_depth)
    for name in GRADS:
        e = rel_err(getattr(grads, name), getattr(want, name))
        assert e <= GRAD_TOL, f"{name}: relative error {e:.3g}; seed {seed}"


def test_batched_cameras_match_per_camera_reference():
    rng, seed = make_rng()
    base = scene_for(rng, 300, 40, 30, 2)
    g, cam0 = to_splat(base)
    cams = [cam0] + [splat.Camera(**{k: (np.float32(v) if k == "world_to_camera" else v)
                                     for k, v in random_camera(rng, 40, 30).items()}) for _ in range(2)]
    bgs = rng.uniform(0, 1, (3, 3)).astype(np.float32)
    r = _cpu()
    out = r.forward(g, cams, 2, bgs, depth=True)
    assert out.image.shape == (3, 30, 40, 3) and out.alpha.shape == (3, 30, 40)
    assert out.radii.shape == (3, len(g)) and out.depth.shape == (3, 30, 40)
    refs = [reference.forward(g.means, g.log_scales, g.quats, g.opacity_logits, g.sh, c.world_to_camera, c.fx, c.fy,
                              c.cx, c.cy, c.width, c.height, 2, bgs[i], depth=True) for i, c in enumerate(cams)]
    d_image = rng.normal(size=out.image.shape).astype(np.float32)
    d_depth = (0.1 * rng.normal(size=out.depth.shape)).astype(np.float32)
    for i, ref in enumerate(refs):
        assert_images_close(out.image[i], ref.image, f"image {i}", seed)
        scale = float(np.max(ref.depths[ref.radii > 0], initial=1.0))
        assert_images_close(out.depth[i][..., None] / scale, ref.depth[..., None] / scale, f"depth {i}", seed)
        bad = np.abs(out.image[i] - ref.image).max(axis=2) > 1e-5
        bad |= np.abs(out.alpha[i] - ref.alpha) > 1e-5
        bad |= np.abs(out.depth[i] - ref.depth) > 1e-5 * scale
        d_image[i][bad] = 0.0
        d_depth[i][bad] = 0.0
    grads = r.backward(out, d_image, d_depth=d_depth)
    want = [reference.backward(ref, d_image[i], None, d_depth[i]) for i, ref in enumerate(refs)]
    for name in GRADS[:-1]:
        total = sum(getattr(w, name) for w in want)
        e = rel_err(getattr(grads, name), total)
        assert e <= GRAD_TOL, f"{name}: relative error {e:.3g}; seed {seed}"
    assert grads.means2d.shape == (3, len(g), 2)
    for i, w in enumerate(want):
        e = rel_err(grads.means2d[i], w.means2d)
        assert e <= GRAD_TOL, f"means2d[{i}]: relative error {e:.3g}; seed {seed}"


@pytest.mark.parametrize("pool_size", [1, 4])
def test_backward_pairs_with_its_own_forward(pool_size):
    """Several outputs alive at once: each backward gets its own forward's gradients,
    whether its device still holds that state (pool of 4) or renders it again (pool of 1)."""
    rng, seed = make_rng()
    scenes = [to_splat(scene_for(rng, 200, 33, 29, 1)) for _ in range(3)]
    d_images = [rng.normal(size=(29, 33, 3)).astype(np.float32) for _ in scenes]
    want = []
    for (g, cam), d in zip(scenes, d_images):
        fresh = _cpu()
        fresh.forward(g, cam, 1)
        want.append(fresh.backward(d))  # the older form: the last forward
    r = _cpu(pool_size=pool_size)
    outs = [r.forward(g, cam, 1) for g, cam in scenes]
    for i in (0, 2, 1, 0):  # out of order, and twice
        got = r.backward(outs[i], d_images[i])
        for name in GRADS:
            np.testing.assert_array_equal(getattr(got, name), getattr(want[i], name),
                                          err_msg=f"scene {i} {name}; seed {seed}")
    # The older form keeps meaning "the last forward".
    legacy = r.backward(d_images[2])
    np.testing.assert_array_equal(legacy.means, want[2].means)


def test_depth_and_batch_argument_errors():
    rng, _ = make_rng()
    g, cam = to_splat(scene_for(rng, 20, 16, 16, 0))
    r = _cpu()
    other = splat.Camera(cam.world_to_camera, cam.fx, cam.fy, cam.cx, cam.cy, 17, 16)
    with pytest.raises(ValueError, match=r"\[splat\] camera\[1\]"):
        r.forward(g, [cam, other], 0)
    with pytest.raises(ValueError, match=r"\[splat\] camera"):
        r.forward(g, [], 0)
    with pytest.raises(ValueError, match=r"\[splat\] background"):
        r.forward(g, [cam, cam], 0, np.zeros((3, 3), np.float32))
    out = r.forward(g, cam, 0)
    with pytest.raises(ValueError, match=r"\[splat\] d_depth"):
        r.backward(out, np.zeros((16, 16, 3), np.float32), d_depth=np.zeros((16, 16), np.float32))
    with pytest.raises(ValueError, match=r"\[splat\] d_image"):
        r.backward(out, np.zeros((16, 15, 3), np.float32))


def test_forward_backward_loop_stays_on_one_device():
    """A pass whose backward ran frees its device: a forward/backward loop reuses it."""
    rng, _ = make_rng()
    g, cam = to_splat(scene_for(rng, 100, 24, 20, 0))
    r = _cpu(pool_size=4)
    d = rng.normal(size=(20, 24, 3)).astype(np.float32)
    for _ in range(3):
        out = r.forward(g, cam, 0)
        r.backward(out, d)
    assert len(r._pool._natives) == 1
    alive = [r.forward(g, cam, 0) for _ in range(3)]  # three live outputs: three devices
    assert len(r._pool._natives) == 3 and len(alive) == 3
