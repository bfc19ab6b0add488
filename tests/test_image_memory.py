"""Memory that matches the data: `splat train` keeps one copy of the training images on
the host, its trainer dropping the dataset's views as it copies them (release_images), and `splat check`
reports their footprint from the image headers without decoding any
(splat.data.view_sizes). Measured in subprocesses (VmRSS / VmHWM of the child) on
generated scenes, against a baseline of the same image size with few views, so what
is compared is what grows with the number of views."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE  # noqa: E402

pytestmark = pytest.mark.skipif(not NATIVE or not os.path.exists("/proc/self/status"),
                                reason="needs the native module splat._core and /proc (Linux)")

W, H = 512, 384
MANY, FEW, TEST_VIEWS = 200, 8, 4
# The bound: what grows with the views may be 1.3x the decoded bytes that grew (one copy,
# plus 30% for the allocator and the packed layout's alignment). Two copies are 2x.
ONE_COPY = 1.3

# Runs `splat ARGS...` in this process and reports its memory: VmRSS at the last training
# step (the datasets and the trainer alive) and VmHWM (the peak) at the end.
CHILD = """
import json, sys
from splat import cli, trainer

def status():
    return {l.split(":")[0]: int(l.split()[1]) * 1024 for l in open("/proc/self/status")
            if l.startswith(("VmRSS", "VmHWM"))}

seen = {}
step = trainer.Trainer.step
def recording(self, *a, **k):
    seen["training"] = status()["VmRSS"]
    return step(self, *a, **k)
trainer.Trainer.step = recording
rc = cli.main(sys.argv[1:])
print("MEMORY " + json.dumps(dict(rc=rc, training=seen.get("training"), peak=status()["VmHWM"])))
"""


def write_scene(root, n_train):
    """A Blender scene of n_train + TEST_VIEWS W x H views (smooth images: small PNGs)."""
    from splat.camera import Camera
    from splat.data import synthetic
    from splat.data.dataset import Dataset
    y, x = np.mgrid[0:H, 0:W]
    splits = {}
    for split, k in (("train", n_train), ("test", TEST_VIEWS)):
        cams, imgs = [], []
        for i in range(k):
            a = 2 * np.pi * i / k
            w2c = synthetic.look_at(np.array([3 * np.cos(a), 3 * np.sin(a), 1.0 + 0.1 * (i % 5)]), np.zeros(3),
                                    np.array([0.0, 0.0, 1.0]))
            cams.append(Camera(w2c, 0.8 * W, 0.8 * W, W / 2, H / 2, W, H))
            imgs.append(np.stack([(x + i) % 256, y % 256, np.full_like(x, 7 * i % 256)], -1).astype(np.uint8))
        splits[split] = Dataset(cams, imgs, [f"v{i:04d}" for i in range(k)])
    synthetic.write_blender(root, splits)
    return root


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    root = tmp_path_factory.mktemp("memory")
    return write_scene(root / "few", FEW), write_scene(root / "many", MANY)


def memory(*args) -> dict:
    env = dict(os.environ)
    env.pop("SPLAT_DEBUG", None)
    p = subprocess.run([sys.executable, "-c", CHILD, *map(str, args)], capture_output=True, text=True, env=env,
                       timeout=300)
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("MEMORY ")]
    assert p.returncode == 0 and line, p.stderr[-2000:]
    m = json.loads(line[0].removeprefix("MEMORY "))
    assert m["rc"] == 0, p.stderr[-2000:]
    return m | {"stdout": p.stdout}


def test_train_keeps_one_copy_of_the_images(scenes, tmp_path):
    grown = (MANY - FEW) * W * H * 3        # decoded bytes of the extra views
    runs = {}
    for scene in scenes:
        runs[scene.name] = memory("train", scene, "--steps", 2, "--backend", "cpu", "--quiet", "--out",
                                  tmp_path / scene.name, "--set", "train.init_points=2000")
    few, many = runs["few"], runs["many"]
    training = (many["training"] - few["training"]) / grown
    peak = (many["peak"] - few["peak"]) / grown
    print(f"per decoded byte of {MANY - FEW} more views ({grown / 2**20:.1f} MiB): while training {training:.2f}, "
          f"peak {peak:.2f}")
    assert training <= ONE_COPY, (training, peak)
    # The trainer drops each of the dataset's views as it copies it (release_images):
    # the peak holds one copy too, not two for a moment.
    assert peak <= ONE_COPY, (training, peak)


def test_check_reports_the_footprint_without_decoding(scenes):
    few, many = (memory("check", scene) for scene in scenes)
    grown = (MANY - FEW) * W * H * 3
    assert f"# images: {MANY} train views {W}x{H}, {MANY * W * H * 3 / 2**20:.2f} MiB on the device" in many["stdout"]
    # decoding every view would hold them all (and their float32 intermediates) at once
    assert many["peak"] - few["peak"] < 0.1 * grown, (many["peak"] - few["peak"]) / grown


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2 ** 32 - 1), model=st.sampled_from(["PINHOLE", "OPENCV", "OPENCV_FISHEYE"]),
       downscale=st.integers(1, 3), alpha=st.sampled_from(["composite", "mask"]), rgba=st.booleans(),
       frames=st.sampled_from([None, "1::2", "0"]))
def test_view_sizes_are_the_loaded_sizes(tmp_path_factory, seed, model, downscale, alpha, rgba, frames):
    """view_sizes (headers only) gives every view's size as load_dataset does (an
    undistorted lens's crop included) and flags every view that loads with a mask."""
    from _captures import random_w2c, save_image, write_colmap_text
    from splat.data import load_dataset, view_sizes
    rng = np.random.default_rng(seed)
    root = tmp_path_factory.mktemp("sizes")
    w, h = int(rng.integers(24, 64)), int(rng.integers(24, 64))
    f = float(rng.uniform(0.6, 1.2)) * w
    params = {"PINHOLE": [f, f, w / 2, h / 2], "OPENCV": [f, f, w / 2, h / 2, -0.1, 0.02, 0.001, 0.0],
              "OPENCV_FISHEYE": [f, f, w / 2, h / 2, 0.05, 0.01, 0.0, 0.0]}[model]
    images = []
    for i in range(3):
        img = rng.integers(0, 256, (h, w, 4 if rgba else 3), dtype=np.uint8)
        if rgba:
            img[: h // 3, :, 3] = 0
        save_image(root / "images" / f"im{i}.png", img)
        images.append((f"im{i}.png", 1, random_w2c(rng)))
    write_colmap_text(root, {1: (model, w, h, params)}, images, points=rng.normal(size=(20, 3)))
    kwargs = dict(downscale=downscale, alpha=alpha, frames=frames, test_every=1000)
    ds = load_dataset(root, "all", **kwargs)
    sizes = view_sizes(root, "all", **kwargs)
    assert [(sw, sh) for sw, sh, _ in sizes] == ds.sizes
    masked = [False] * len(ds) if ds.masks is None else [m is not None for m in ds.masks]
    assert all(flag or not m for (_, _, flag), m in zip(sizes, masked))


def test_release_images_drops_each_view_and_trains_the_same():
    """Trainer(release_images=True): every view's arrays are gone once the trainer
    holds its copy (no reference left, no collection needed), the dataset says so
    when read, and training is the same as from a dataset that keeps its images."""
    import weakref

    import splat
    from _scenes import make_rng
    from test_training import make_dataset, random_gaussians, small_config
    rng, seed = make_rng()
    keep = make_dataset(rng, random_gaussians(rng, 80), n_views=5)
    drop = keep.subset(list(range(len(keep))))
    drop.images = [im.copy() for im in drop.images]   # its own arrays, nothing else refers to
    refs = [weakref.ref(im) for im in drop.images]
    cfg, bc = small_config(seed=3), splat.BackendConfig(backend="cpu")
    a = splat.Trainer.from_dataset(keep, cfg, bc)
    b = splat.Trainer.from_dataset(drop, cfg, bc, release_images=True)
    assert all(r() is None for r in refs), seed
    with pytest.raises(RuntimeError, match="released"):
        drop.images[0]
    for _ in range(4):
        la, lb = a.step().loss, b.step().loss
        assert lb == pytest.approx(la, rel=1e-5), seed
    for k, v in a.state().items():
        np.testing.assert_allclose(b.state()[k], v, rtol=1e-5, atol=1e-6, err_msg=f"{k}; seed {seed}")
    with pytest.raises(TypeError, match="release_images"):
        splat.Trainer.from_dataset(keep, cfg, bc, release_images="yes")
