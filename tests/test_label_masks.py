"""Masks written as labels (only the values 0 and 1, 8- or 16-bit PNG) keep the
pixels marked 1, with one warning per dataset; masks that keep nothing are a
warning naming the views, or an error when no view keeps a pixel."""
from __future__ import annotations

import os
import sys
import warnings

import numpy as np
import pytest
from PIL import Image

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE, splat  # noqa: E402,F401
import _captures as cap  # noqa: E402
from _hypo import quick  # noqa: E402

from splat.data import DatasetError, load_dataset  # noqa: E402

W, H = 16, 12
LABEL = "label masks"


def save_mask(path, values: np.ndarray, bits: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    im = Image.fromarray(values.astype(np.uint16)) if bits == 16 else Image.fromarray(values.astype(np.uint8))
    im.save(path)
    with Image.open(path) as back:          # the file holds the values as written
        assert np.array_equal(np.asarray(back).astype(np.int64), values.astype(np.int64))


def capture(root, masks: list, bits: int = 8):
    """A COLMAP capture with one view per mask (`masks[k]` written as given)."""
    rng = np.random.default_rng(len(masks))
    names = [f"{k:02d}.png" for k in range(len(masks))]
    for name, m in zip(names, masks):
        cap.save_image(root / "images" / name, rng.integers(0, 256, (H, W, 3), dtype=np.uint8))
        save_mask(root / "masks" / name, m, bits)
    cap.write_colmap_text(root, {1: ("PINHOLE", W, H, [14.0, 14.0, W / 2, H / 2])},
                          [(n, 1, cap.random_w2c(rng)) for n in names])
    return names


def load_recording(root, **kwargs):
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        ds = load_dataset(root, "all", **kwargs)
    return ds, [str(w.message) for w in got]


@st.composite
def keep_maps(draw, views=st.integers(1, 4)):
    """Per view a bool [H, W] with at least one kept and one ignored pixel."""
    out = []
    for _ in range(draw(views)):
        seed = draw(st.integers(0, 2 ** 32 - 1))
        share = draw(st.floats(0.05, 0.95))
        m = np.random.default_rng(seed).uniform(size=(H, W)) < share
        m[0, 0], m[-1, -1] = True, False
        out.append(m)
    return out


@quick(10)
@given(keep=keep_maps(), bits=st.sampled_from([8, 16]))
def test_label_masks_keep_the_ones_with_one_warning(tmp_path_factory, keep, bits):
    root = tmp_path_factory.mktemp("label")
    capture(root, [m.astype(np.uint8) for m in keep], bits)
    ds, warned = load_recording(root)
    assert ds.masks is not None
    for got, want in zip(ds.masks, keep):
        np.testing.assert_array_equal(got, want)
    labelled = [w for w in warned if LABEL in w]
    assert len(labelled) == 1, warned
    assert labelled[0].startswith(f"[splat] {root / 'masks'}: ") and "1 = use" in labelled[0]


@quick(10)
@given(keep=keep_maps(), bits=st.sampled_from([8, 16]))
def test_white_masks_read_as_before_without_a_warning(tmp_path_factory, keep, bits):
    root = tmp_path_factory.mktemp("white")
    top = 255 if bits == 8 else 65535
    capture(root, [np.where(m, top, 0) for m in keep], bits)
    ds, warned = load_recording(root)
    for got, want in zip(ds.masks, keep):
        np.testing.assert_array_equal(got, want)
    assert warned == []


def test_a_view_whose_mask_keeps_nothing_is_named(tmp_path):
    keep = np.zeros((H, W), bool)
    keep[2:5, 3:9] = True
    names = capture(tmp_path, [np.where(keep, 255, 0), np.zeros((H, W)), np.where(keep, 255, 0),
                               np.zeros((H, W))])
    ds, warned = load_recording(tmp_path)
    empty = [w for w in warned if "keep no pixel" in w]
    assert len(empty) == 1, warned
    assert f"2 of 4 views ({names[1]}, {names[3]})" in empty[0]
    assert len(ds) == 4


def test_masks_that_keep_nothing_at_all_are_an_error(tmp_path):
    names = capture(tmp_path, [np.zeros((H, W)), np.zeros((H, W)), np.zeros((H, W))])
    with pytest.raises(DatasetError) as exc:
        load_dataset(tmp_path, "all")
    msg = str(exc.value)
    assert len(msg.splitlines()) == 1
    assert str(tmp_path / "masks") in msg and all(n in msg for n in names) and "keep no pixel" in msg


def test_transparent_images_with_alpha_as_mask_are_an_error(tmp_path):
    rgba = np.zeros((H, W, 4), np.uint8)
    rgba[..., :3] = 200
    cap.save_image(tmp_path / "images" / "a.png", rgba)
    cap.write_colmap_text(tmp_path, {1: ("PINHOLE", W, H, [14.0, 14.0, W / 2, H / 2])},
                          [("a.png", 1, cap.random_w2c(np.random.default_rng(0)))])
    with pytest.raises(DatasetError, match=r"keep no pixel.*a\.png"):
        load_dataset(tmp_path, "all", alpha="mask")


@pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")
def test_training_on_label_masks_has_a_loss(tmp_path):
    """The reported failure: 0/1 masks made every view fully masked and the loss 0.0."""
    keep = np.ones((H, W), np.uint8)
    keep[:, : W // 3] = 0
    capture(tmp_path, [keep] * 3)
    ds, _ = load_recording(tmp_path)
    assert all(m is not None and m.sum() == H * (W - W // 3) for m in ds.masks)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tr = splat.Trainer.from_dataset(ds, splat.TrainConfig(init_points=200, steps=3),
                                        splat.BackendConfig(backend="cpu"))
    losses = [tr.step().loss for _ in range(3)]
    assert all(np.isfinite(x) and x > 1e-3 for x in losses), losses
