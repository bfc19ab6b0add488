"""Image decoding on the format's scale, checked against the values the test wrote."""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _pkg  # noqa: E402,F401
from _images import GRAY, GRAY_ALPHA, PALETTE, RGB, RGBA, write_png  # noqa: E402
from splat.data import DatasetError, load_dataset  # noqa: E402
from splat.data.images import read_image  # noqa: E402

try:
    import tifffile
except ImportError:  # optional: TIFFs then go through Pillow
    tifffile = None

H, W = 9, 11  # odd sizes: partial bytes at depths below 8


def expected(samples: np.ndarray, depth: int) -> np.ndarray:
    """The 0..255 value of each sample: v * 255 / (2^depth - 1), exactly, in float64."""
    return samples.astype(np.float64) * 255.0 / (2 ** depth - 1)


def as_rgb(values: np.ndarray, channels: int) -> np.ndarray:
    """Grey (+ alpha) replicated to RGB (+ alpha), as read_image returns it."""
    if channels == 1:
        return np.repeat(values[..., :1], 3, axis=2)
    if channels == 2:
        return np.concatenate([np.repeat(values[..., :1], 3, axis=2), values[..., 1:]], axis=2)
    return values


@pytest.mark.parametrize("color,depth", [
    (GRAY, 1), (GRAY, 2), (GRAY, 4), (GRAY, 8), (GRAY, 16), (RGB, 8), (RGB, 16),
    (GRAY_ALPHA, 8), (GRAY_ALPHA, 16), (RGBA, 8), (RGBA, 16),
])
def test_png_every_depth_on_its_format_scale(tmp_path, color, depth):
    rng = np.random.default_rng()
    ch = {GRAY: 1, RGB: 3, GRAY_ALPHA: 2, RGBA: 4}[color]
    samples = rng.integers(0, 2 ** depth, (H * 3, W, ch))
    path = tmp_path / "im.png"
    write_png(path, samples, depth, color, rng=rng)
    got = read_image(path)
    want = as_rgb(expected(samples, depth), ch)
    assert got.shape == want.shape
    if depth <= 8:
        assert got.dtype == np.uint8
        np.testing.assert_array_equal(got, np.rint(want).astype(np.uint8))
    else:
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * 255)


def test_16bit_png_with_small_values_is_not_rescaled(tmp_path):
    """A 16-bit PNG whose values are all <= 255 is dark, not 8-bit data."""
    rng = np.random.default_rng()
    for color, ch in ((GRAY, 1), (RGB, 3)):
        samples = rng.integers(0, 256, (H, W, ch))
        write_png(tmp_path / "dark.png", samples, 16, color, rng=rng)
        got = read_image(tmp_path / "dark.png")
        assert got.max() <= 255 * 255 / 65535 + 1e-4
        np.testing.assert_allclose(got, as_rgb(expected(samples, 16), ch), atol=2e-5 * 255)


def test_palette_and_transparency_chunks(tmp_path):
    rng = np.random.default_rng()
    palette = rng.integers(0, 256, (16, 3))
    idx = rng.integers(0, 16, (H, W))
    write_png(tmp_path / "p.png", idx, 4, PALETTE, rng=rng, palette=palette)
    np.testing.assert_array_equal(read_image(tmp_path / "p.png"), palette[idx].astype(np.uint8))
    # 16-bit grey with a transparent key value
    gray = rng.integers(0, 65536, (H, W))
    key = int(gray[2, 3])
    write_png(tmp_path / "t.png", gray, 16, GRAY, rng=rng, trns=key.to_bytes(2, "big"))
    got = read_image(tmp_path / "t.png")
    assert got.shape == (H, W, 4)
    np.testing.assert_array_equal(got[..., 3] == 0, gray == key)
    np.testing.assert_allclose(got[..., 0], expected(gray, 16), atol=2e-5 * 255)


def write_scene(root, images: list[np.ndarray], depth: int, color: int, rng) -> None:
    """A Blender scene of the given sample arrays (one train view each)."""
    (root / "train").mkdir(parents=True)
    frames = []
    for i, samples in enumerate(images):
        write_png(root / "train" / f"v{i}.png", samples, depth, color, rng=rng)
        c2w = np.eye(4)
        c2w[2, 3] = 3.0 + i
        frames.append({"file_path": f"./train/v{i}", "transform_matrix": c2w.tolist()})
    (root / "transforms_train.json").write_text(json.dumps({"camera_angle_x": 0.7, "frames": frames}))


@pytest.mark.parametrize("downscale", [1, 2])
def test_16bit_rgba_scene_composites_at_full_precision(tmp_path, downscale):
    """A 16-bit RGBA scene loads to round(255 (rgb a + bg (1 - a))) of the box-averaged samples."""
    rng = np.random.default_rng()
    images = [rng.integers(0, 65536, (2 * H, 2 * W, 4)) for _ in range(2)]
    write_scene(tmp_path / "s", images, 16, RGBA, rng)
    bg = rng.uniform(0, 1, 3)
    ds = load_dataset(tmp_path / "s", "train", background=bg, downscale=downscale)
    for got, samples in zip(ds.images, images):
        x = samples.astype(np.float64) / 65535.0
        h, w = x.shape[0] // downscale, x.shape[1] // downscale
        x = x[: h * downscale, : w * downscale].reshape(h, downscale, w, downscale, 4).mean(axis=(1, 3))
        want = 255.0 * (x[..., :3] * x[..., 3:] + bg * (1.0 - x[..., 3:]))
        diff = np.abs(got.astype(np.float64) - want)
        assert diff.max() < 0.5 + 1e-3  # every pixel rounds to a nearest integer


@pytest.mark.skipif(tifffile is None, reason="tifffile is not installed")
def test_float_and_16bit_tiffs(tmp_path):
    rng = np.random.default_rng()
    rgb = rng.uniform(0, 1, (H, W, 3)).astype(np.float32)
    tifffile.imwrite(tmp_path / "f.tif", rgb, photometric="rgb")
    np.testing.assert_allclose(read_image(tmp_path / "f.tif"), rgb.astype(np.float64) * 255.0, rtol=1e-6)
    gray = rng.uniform(0, 1, (H, W)).astype(np.float64)
    tifffile.imwrite(tmp_path / "g.tif", gray, photometric="minisblack")
    np.testing.assert_allclose(read_image(tmp_path / "g.tif"), np.repeat(gray[..., None], 3, 2) * 255.0,
                               rtol=1e-6)
    rgba = rng.uniform(0, 1, (H, W, 4)).astype(np.float32)
    tifffile.imwrite(tmp_path / "a.tif", rgba, photometric="rgb", extrasamples=["unassalpha"])
    np.testing.assert_allclose(read_image(tmp_path / "a.tif"), rgba.astype(np.float64) * 255.0, rtol=1e-6)
    u16 = rng.integers(0, 65536, (H, W, 3)).astype(np.uint16)
    tifffile.imwrite(tmp_path / "u.tif", u16, photometric="rgb")
    np.testing.assert_allclose(read_image(tmp_path / "u.tif"), expected(u16, 16), atol=2e-5 * 255)
    planar = rng.integers(0, 65536, (3, H, W)).astype(np.uint16)
    tifffile.imwrite(tmp_path / "p.tif", planar, photometric="rgb", planarconfig="separate")
    np.testing.assert_allclose(read_image(tmp_path / "p.tif"), expected(np.moveaxis(planar, 0, -1), 16),
                               atol=2e-5 * 255)


@pytest.mark.skipif(tifffile is None, reason="tifffile is not installed")
def test_bad_tiffs_are_rejected_naming_the_file(tmp_path):
    rng = np.random.default_rng()
    cases = {
        "over.tif": (rng.uniform(0, 1.5, (H, W, 3)).astype(np.float32), "must lie in \\[0, 1\\]"),
        "neg.tif": (rng.uniform(-0.5, 1, (H, W)).astype(np.float32), "must lie in \\[0, 1\\]"),
        "nan.tif": (np.full((H, W), np.nan, np.float32), "NaN"),
        "i32.tif": (rng.integers(0, 1000, (H, W, 3)).astype(np.int32), "sample type int32"),
    }
    for name, (arr, why) in cases.items():
        tifffile.imwrite(tmp_path / name, arr, photometric="rgb" if arr.ndim == 3 else "minisblack")
        with pytest.raises(DatasetError, match=rf"{name}: .*{why}"):
            read_image(tmp_path / name)


def test_other_modes_are_rejected_or_decoded(tmp_path):
    rng = np.random.default_rng()
    Image.new("LAB", (W, H), (50, 10, 20)).save(tmp_path / "lab.tif")
    with pytest.raises(DatasetError, match=r"lab.tif: unsupported image mode 'LAB'"):
        read_image(tmp_path / "lab.tif")
    ints = rng.integers(-1000, 70000, (H, W)).astype(np.int32)
    Image.fromarray(ints).save(tmp_path / "i.tif")  # 32-bit integer pixels: no defined range
    with pytest.raises(DatasetError, match=r"i.tif: "):
        read_image(tmp_path / "i.tif")
    cmyk = rng.integers(0, 256, (H, W, 4)).astype(np.uint8)
    Image.fromarray(cmyk, mode="CMYK").save(tmp_path / "c.jpg", quality=100)
    got = read_image(tmp_path / "c.jpg")
    assert got.shape == (H, W, 3) and got.dtype == np.uint8
    (tmp_path / "trunc.png").write_bytes((tmp_path / "c.jpg").read_bytes()[:40])
    with pytest.raises(DatasetError, match=r"trunc.png: cannot decode image"):
        read_image(tmp_path / "trunc.png")


def test_tiffs_without_tifffile(tmp_path, monkeypatch):
    """Without tifffile, Pillow reads grey float TIFFs and refuses RGB float ones with a hint."""
    if tifffile is None:
        pytest.skip("tifffile is not installed")
    rng = np.random.default_rng()
    gray = rng.uniform(0, 1, (H, W)).astype(np.float32)
    tifffile.imwrite(tmp_path / "g.tif", gray, photometric="minisblack")
    rgb = rng.uniform(0, 1, (H, W, 3)).astype(np.float32)
    tifffile.imwrite(tmp_path / "f.tif", rgb, photometric="rgb")
    u16 = rng.integers(0, 65536, (H, W, 3)).astype(np.uint16)
    tifffile.imwrite(tmp_path / "u.tif", u16, photometric="rgb")
    monkeypatch.setitem(sys.modules, "tifffile", None)  # import fails
    np.testing.assert_allclose(read_image(tmp_path / "g.tif"), np.repeat(gray[..., None], 3, 2) * 255.0, rtol=1e-6)
    with pytest.raises(DatasetError, match=r"f.tif: cannot decode image .*pip install tifffile"):
        read_image(tmp_path / "f.tif")
    with pytest.raises(DatasetError, match=r"u.tif: 16-bit colour TIFF images need tifffile"):
        read_image(tmp_path / "u.tif")
