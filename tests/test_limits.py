"""The native core's numeric limits on the CPU backend (docs/architecture.md,
"Numeric limits"): just below each one the rasterizer and trainer work and
agree with an independent result, just above it they stop with a `[splat]`
ValueError naming the limit and the value, never a crash. Pair counts past
2^32 must be counted exactly (a 32-bit total wrapped and the binning wrote out
of bounds). Scenes: tests/_limits.py. The same boundaries at full size on a
GPU: test_cuda_limits.py.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

import splat
from splat import _core
from _limits import limit_arrays, limit_camera, limit_scene, pair_error, tiles
from _parity import assert_images_close, reference_of
from _scenes import make_rng, random_camera, random_scene

TESTS = os.path.dirname(os.path.abspath(__file__))


CPU = splat.BackendConfig(backend="cpu")


def cpu():
    return splat.Rasterizer(CPU)


def test_limits_are_exposed():
    assert _core.MAX_GAUSSIANS == 2 ** 24
    assert _core.MAX_IMAGE_SIDE == 16384
    assert _core.MAX_PAIRS == 2 ** 31 - 1
    assert _core.MAX_SPLIT_COUNT == 256


# --------------------------------------------------------------------------- pairs
def run_isolated(code):
    """Runs `code` in a fresh interpreter (a regression here used to kill the
    process with SIGSEGV); returns its stdout."""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       cwd=TESTS, env=dict(os.environ, PYTHONPATH=TESTS + os.pathsep + os.environ.get("PYTHONPATH", "")))
    assert p.returncode == 0, f"rc {p.returncode}: {p.stderr[-3000:]}"
    return p.stdout


@pytest.mark.parametrize("n_big, n_tiny", [(65536, 0), (65537, 1)])
def test_pair_counts_past_two_to_the_32_are_counted_exactly(n_big, n_tiny):
    """The reported segfault: 65536 screen-covering Gaussians on 4096x4096 are
    exactly 2^32 pairs, which a uint32 total read as 0; 2^32 + 2^16 + 1 would
    have read as 65537 and rendered. Both stop with the exact count."""
    pairs = n_big * tiles(4096) + n_tiny
    out = run_isolated(f"""
import re, numpy as np, splat
from _limits import limit_scene, pair_error
g, cam = limit_scene(np.random.default_rng(1), {n_big}, {n_tiny}, 4096)
r = splat.Rasterizer(splat.BackendConfig(backend="cpu"))
try:
    r.forward(g, cam, sh_degree=0)
    print("rendered")
except ValueError as e:
    print("matches" if re.match(pair_error({pairs}), str(e)) else "other: " + str(e))
""")
    assert out.strip() == "matches", (out, pairs)


def test_one_pair_past_the_limit_stops_and_leaves_no_forward_behind():
    """2^31 pairs (one past the limit) stop before any pair buffer exists; the
    backward of that failed forward is refused, and the rasterizer still
    renders the next call."""
    rng, seed = make_rng()
    r = cpu()
    small_g, small_cam = limit_scene(rng, 3, 2, 64)
    first = r.forward(small_g, small_cam, sh_degree=0)
    g, cam = limit_scene(rng, 2 ** 31 // tiles(4096), 0, 4096)
    with pytest.raises(ValueError, match=pair_error(2 ** 31) + r" \(2\^31 - 1\)"):
        r.forward(g, cam, sh_degree=0)
    with pytest.raises(RuntimeError, match=r"backward\(\) needs a completed forward"):
        r.backward(np.ones((64, 64, 3), np.float32))
    again = r.forward(small_g, small_cam, sh_degree=0)
    np.testing.assert_array_equal(again.image, first.image)


def test_2_to_the_24_pairs_render_as_their_small_equivalent():
    """4096 screen-covering Gaussians on 1024x1024: 2^24 pairs, the deepest
    tile lists 4096 long. Every pixel saturates within the first 300 splats
    (alpha 0.034 at the corners), so image, alpha and radii are those of the
    first 512 alone (the same float operations: equal bit for bit), the
    gradients of those are theirs and every other Gaussian's are zero; the 512
    match the float64 reference."""
    rng, seed = make_rng()
    size, n_big, few = 1024, 4096, 512
    r = cpu()
    arrays = limit_arrays(rng, n_big, 0, size)
    cam = limit_camera(size)
    g = splat.Gaussians(*arrays)
    out = r.forward(g, cam, sh_degree=0, background=(0.25, 0.5, 0.75))
    d_image = rng.normal(0, 1, out.image.shape).astype(np.float32)
    grads = r.backward(d_image)
    small = splat.Gaussians(*(a[:few] for a in arrays))
    want = r.forward(small, cam, sh_degree=0, background=(0.25, 0.5, 0.75))
    want_grads = r.backward(d_image)
    np.testing.assert_array_equal(out.image, want.image)
    np.testing.assert_array_equal(out.alpha, want.alpha)
    np.testing.assert_array_equal(out.radii[:few], want.radii)
    assert np.all(out.radii > 0)
    for name in ("means", "log_scales", "quats", "opacity_logits", "sh", "means2d"):
        got, exp = getattr(grads, name), getattr(want_grads, name)
        np.testing.assert_array_equal(got[:few], exp, err_msg=f"{name}; seed {seed}")
        assert not np.any(got[few:]), (name, seed)
    assert np.abs(want_grads.means[:3]).max() > 0, seed
    # The small equivalent against the reference on a 1/8 crop of the pixels
    # (the same camera, fewer of them: the reference is per pixel in numpy).
    crop = splat.Camera(cam.world_to_camera, cam.fx, cam.fy, cam.cx, cam.cy, 128, 128)
    ref = reference_of(small, crop, 0, np.array([0.25, 0.5, 0.75]))
    got = r.forward(small, crop, sh_degree=0, background=(0.25, 0.5, 0.75))
    assert_images_close(got.image, ref.image, "crop image", seed)
    np.testing.assert_array_equal(got.image, want.image[:128, :128])


# --------------------------------------------------------------------------- Gaussians
def test_one_gaussian_past_the_limit_stops_before_copying():
    """2^24 + 1 Gaussians stop with the count and the limit (zeros from calloc
    stay untouched: the check comes before the native copies)."""
    n = 2 ** 24 + 1
    z3, z4 = np.zeros((n, 3), np.float32), np.zeros((n, 4), np.float32)
    w2c = np.eye(4, dtype=np.float32)
    native = _core.Rasterizer(splat.BackendConfig(backend="cpu"))
    with pytest.raises(ValueError, match=r"\[splat\] 16777217 Gaussians exceed the limit of 16777216"):
        native.forward(z3, z3, z4, np.zeros(n, np.float32), np.zeros((n, 1, 3), np.float32), w2c,
                       10.0, 10.0, 8.0, 8.0, 16, 16, 0, np.zeros(3, np.float32))


@pytest.mark.slow
def test_2_to_the_24_gaussians_render_as_the_visible_few():
    """Exactly 2^24 Gaussians (all but 6 behind the camera, which culls them:
    about 2.5 GiB of arrays)
    render the image of the 6 visible ones alone, bit for bit, with the same
    radii; the culled ones have zero radii and gradients."""
    rng, seed = make_rng()
    n, few = 2 ** 24, 6
    scene = random_scene(rng, n=few, sh_degree=0, width=40, height=32)
    w2c = scene.world_to_camera
    means = np.empty((n, 3), np.float32)
    means[:] = -w2c[:3, :3].T @ w2c[:3, 3] - 10.0 * w2c[2, :3]  # 10 units behind the camera
    means[:few] = scene.means
    log_scales = np.full((n, 3), -2.0, np.float32)
    log_scales[:few] = scene.log_scales
    quats = np.zeros((n, 4), np.float32)
    quats[:, 0] = 1.0
    quats[:few] = scene.quats
    opacity = np.zeros(n, np.float32)
    opacity[:few] = scene.opacity_logits
    sh = np.zeros((n, 1, 3), np.float32)
    sh[:few] = scene.sh
    cam = splat.Camera(scene.world_to_camera.astype(np.float32), scene.fx, scene.fy, scene.cx, scene.cy,
                       scene.width, scene.height)
    r = cpu()
    out = r.forward(splat.Gaussians(means, log_scales, quats, opacity, sh), cam, sh_degree=0)
    want = r.forward(splat.Gaussians(means[:few], log_scales[:few], quats[:few], opacity[:few], sh[:few]), cam,
                     sh_degree=0)
    np.testing.assert_array_equal(out.image, want.image)
    np.testing.assert_array_equal(out.radii[:few], want.radii)
    assert not np.any(out.radii[few:])


# --------------------------------------------------------------------------- image size
@pytest.mark.parametrize("width, height", [(16384, 16), (16, 16384)])
def test_image_sides_at_the_limit_match_the_reference(width, height):
    """Both sides' limits on a strip one tile thick, against the float64
    reference (a 60 degree field of view along the long side)."""
    rng, seed = make_rng()
    f = 0.5 * max(width, height) / np.tan(np.radians(30.0))
    camera = random_camera(rng, width, height)
    camera.update(fx=f, fy=f, cx=width / 2, cy=height / 2)
    scene = random_scene(rng, n=40, sh_degree=0, width=width, height=height, camera=camera)
    g = splat.Gaussians(*(np.ascontiguousarray(a, np.float32) for a in (
        scene.means, scene.log_scales, scene.quats, scene.opacity_logits, scene.sh)))
    cam = splat.Camera(scene.world_to_camera.astype(np.float32), scene.fx, scene.fy, scene.cx, scene.cy, width, height)
    bg = np.array([0.25, 0.5, 0.75])
    got = cpu().forward(g, cam, sh_degree=0, background=tuple(bg))
    ref = reference_of(g, cam, 0, bg)
    assert got.image.shape == (height, width, 3)
    assert_images_close(got.image, ref.image, f"{width}x{height}", seed)


@pytest.mark.parametrize("width, height", [(16385, 16), (16, 16385)])
def test_one_pixel_past_the_side_limit_stops(width, height):
    g, _ = limit_scene(np.random.default_rng(0), 1, 0, 64)
    cam = splat.Camera(np.eye(4, dtype=np.float32), 100.0, 100.0, 8.0, 8.0, width, height)
    with pytest.raises(ValueError, match=rf"\[splat\] image size {width}x{height}: each side must be 1..16384 pixels"):
        cpu().forward(g, cam, sh_degree=0)


# --------------------------------------------------------------------------- training
def limit_dataset(size, views=1):
    from splat.data.dataset import Dataset
    cam = limit_camera(size)
    images = np.full((views, size, size, 3), 128, np.uint8)
    return Dataset(cameras=[cam] * views, images=images, names=[f"v{i}" for i in range(views)])


def state_of(arrays):
    return dict(zip(("means", "log_scales", "quats", "opacity_logits", "sh"), arrays))


def test_training_stops_at_the_pair_limit_without_counting_the_step():
    """A training view past the pair limit stops the step with the error; the
    step is not counted and the state is the one before it."""
    rng, seed = make_rng()
    arrays = limit_arrays(rng, 2 ** 31 // tiles(4096), 0, 4096)
    tr = splat.Trainer(limit_dataset(4096), splat.TrainConfig(steps=10, sh_degree=0), CPU, state_of(arrays))
    with pytest.raises(ValueError, match=pair_error(2 ** 31)):
        tr.step()
    assert tr.step_count == 0
    np.testing.assert_array_equal(tr.state()["means"], arrays[0])


def test_trainer_images_past_the_side_limit_stop():
    rng, _ = make_rng()
    from splat.data.dataset import Dataset
    cam = splat.Camera(np.eye(4, dtype=np.float32), 100.0, 100.0, 8.0, 8.0, 16385, 16)
    ds = Dataset(cameras=[cam], images=np.zeros((1, 16, 16385, 3), np.uint8), names=["a"])
    with pytest.raises(ValueError, match=r"image size 16385x16: each side must be 1..16384"):
        splat.Trainer(ds, splat.TrainConfig(steps=1, sh_degree=0), CPU, state_of(limit_arrays(rng, 1, 0, 64)))


@pytest.mark.parametrize("split_count", [256, 257])
def test_split_count_limit(split_count):
    """256 children per split work (three split Gaussians, behind the camera,
    with forced statistics: 3 x 256 Gaussians after densifying, each child
    from its parent); 257 stop when the trainer is made, since the GPU scans
    n (split_count - 1) extras in 32 bits."""
    rng, seed = make_rng()
    cfg = splat.TrainConfig(steps=10, sh_degree=0, densify_from=0, densify_until=100, densify_every=1,
                            split_count=min(split_count, 256), prune_max_world_scale=1e6)
    n = 3
    means = rng.normal(0, 0.1, (n, 3)).astype(np.float32) + np.float32([0, 0, -50])  # behind the camera
    state = dict(means=means, log_scales=np.full((n, 3), 0.5, np.float32), quats=np.tile(np.float32([1, 0, 0, 0]), (n, 1)),
                 opacity_logits=np.full(n, 2.0, np.float32), sh=rng.normal(0, 0.3, (n, 1, 3)).astype(np.float32),
                 grad_accum=np.ones(n, np.float32), grad_count=np.ones(n, np.float32),
                 max_radii=np.zeros(n, np.float32))
    errors = splat.check_config({"train": {"split_count": split_count}})
    assert any(e.startswith("train.split_count") for e in errors) == (split_count > 256), errors
    if split_count > _core.MAX_SPLIT_COUNT:
        # Past the config's own check, the trainer refuses it too (the config is checked again
        # there), and so does the native trainer behind it.
        object.__setattr__(cfg, "split_count", split_count)
        with pytest.raises(ValueError, match=r"\[splat\] train.split_count: must be in \[2, 256\], got 257"):
            splat.Trainer(limit_dataset(32), cfg, CPU, state, scene_extent=1.0)
        from splat.trainer import _NATIVE_SETTINGS, _camera_arrays
        ds = limit_dataset(32)
        w2c, intr = _camera_arrays(ds.cameras)
        settings = {k: getattr(cfg, k) for k in _NATIVE_SETTINGS}
        with pytest.raises(ValueError, match=r"\[splat\] split_count 257: must be 2..256"):
            _core.Trainer(CPU, settings, w2c, intr, list(ds.images), None, state, 0)
        return
    tr = splat.Trainer(limit_dataset(32), cfg, CPU, state, scene_extent=1.0)
    stats = tr.step()
    assert stats.densified and tr.num_gaussians == n * split_count, (stats, seed)
    after = tr.state()["means"]
    for i in range(n):  # children of parent i are rows 256 i .. 256 (i + 1), near the parent
        kids = after[split_count * i: split_count * (i + 1)]
        assert np.all(np.abs(kids - means[i]).max(axis=1) < 50 * np.exp(0.5)), seed


def test_supersampled_evaluation_past_the_side_limit_stops_before_training(tmp_path, capsys):
    """data.eval_supersample x the test views' size past 16384 pixels stops
    `splat train` before the first step (the first evaluation would have
    failed after training for thousands of steps); just below it passes."""
    from splat import cli
    from splat.metrics import check_supersample
    from _scenes import write_blender_scene
    write_blender_scene(tmp_path / "scene", 1025, n_test_views=1, n_gaussians=20, n_views=2)
    cfg = tmp_path / "run.toml"
    out = tmp_path / "out"
    cfg.write_text(f'[data]\npath = "scene"\neval_supersample = 16\n[train]\nsteps = 5\n'
                   f'[backend]\nbackend = "cpu"\n[output]\ndir = "{out}"\n')
    assert cli.main(["train", "--config", str(cfg), "--quiet"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("splat: error: data.eval_supersample: 16x renders of these views are 16400 pixels "
                       "a side, past the limit of 16384"), err
    assert not out.exists() or {p.name for p in out.iterdir()} <= {".splat.lock"}  # no file of a run
    test = splat.load_dataset(tmp_path / "scene", split="test")
    check_supersample(test, 15)  # 15375 pixels: within the limit
    with pytest.raises(ValueError, match=r"\[splat\] supersample: 16x renders"):
        splat.evaluate(None, test, supersample=16)


def test_a_render_past_the_pair_limit_leaves_the_trainer_usable():
    """A render at a camera past the pair limit stops; the debug snapshot then
    refuses (its camera is not its binning's) instead of reading past the
    tile ranges, and training goes on."""
    rng, seed = make_rng()
    arrays = limit_arrays(rng, 2 ** 31 // tiles(4096), 0, 64)
    tr = splat.Trainer(limit_dataset(64), splat.TrainConfig(steps=10, sh_degree=0), CPU, state_of(arrays))
    tr.step()
    assert tr._native.debug_snapshot()["sorted_gauss"].size == arrays[0].shape[0] * tiles(64)
    with pytest.raises(ValueError, match=pair_error(2 ** 31)):
        tr.render(limit_camera(4096))
    with pytest.raises(RuntimeError, match=r"\[trainer\] no debug snapshot"):
        tr._native.debug_snapshot()
    tr.step()
    assert tr.step_count == 2
    assert tr._native.debug_snapshot()["sorted_gauss"].size == arrays[0].shape[0] * tiles(64)
