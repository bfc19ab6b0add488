"""The Dataset's per-view sizes, masks and alphas (the contract loaders produce)."""
import numpy as np
import pytest

from splat import Camera
from splat.data import Dataset

rng = np.random.default_rng()


def cam(w, h):
    return Camera(np.eye(4, dtype=np.float32), 0.9 * w, 0.9 * w, w / 2, h / 2, w, h)


def image(w, h):
    return rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)


def test_mixed_sizes_list_of_images():
    sizes = [(12, 8), (8, 12), (12, 8), (10, 10)]
    imgs = [image(w, h) for w, h in sizes]
    masks = [rng.random((8, 12)) > 0.3, None, None, rng.random((10, 10)) > 0.5]
    alphas = [rng.integers(0, 256, size=(h, w), dtype=np.uint8) for w, h in sizes]
    ds = Dataset([cam(w, h) for w, h in sizes], imgs, list("abcd"), masks=masks, alphas=alphas)
    assert ds.sizes == sizes and not ds.uniform_size
    assert all(a is b or np.array_equal(a, b) for a, b in zip(ds.images, imgs))
    assert all(im.flags.c_contiguous and im.dtype == np.uint8 for im in ds.images)
    with pytest.raises(ValueError, match=r"\[splat\] dataset: images have different sizes"):
        ds.width
    with pytest.raises(ValueError, match="different sizes"):
        ds.height
    assert "mixed sizes" in ds.size_summary()
    sub = ds.subset([3, 1])
    assert sub.names == ["d", "b"] and sub.sizes == [sizes[3], sizes[1]]
    assert np.array_equal(sub.images[0], imgs[3]) and np.array_equal(sub.masks[0], masks[3])
    assert sub.masks[1] is None and np.array_equal(sub.alphas[1], alphas[1])
    # a subset whose views have no mask drops the list
    assert ds.subset([1, 2]).masks is None


def test_uniform_array_is_split_into_views():
    arr = rng.integers(0, 256, size=(3, 6, 9, 3), dtype=np.uint8)
    ds = Dataset([cam(9, 6)] * 3, arr, ["a", "b", "c"])
    assert isinstance(ds.images, list) and len(ds.images) == 3
    assert (ds.width, ds.height) == (9, 6) and ds.uniform_size and ds.size_summary() == "9x6"
    assert np.array_equal(np.stack(ds.images), arr)
    assert ds.masks is None and ds.alphas is None
    assert Dataset([cam(9, 6)] * 3, arr, list("abc"), masks=[None] * 3).masks is None


def test_bad_views_are_named():
    with pytest.raises(ValueError, match=r"cameras\[1\] \(b\).*12x8.*8x12"):
        Dataset([cam(12, 8), cam(12, 8)], [image(12, 8), image(8, 12)], ["a", "b"])
    with pytest.raises(ValueError, match=r"images\[1\]: expected uint8"):
        Dataset([cam(4, 4)] * 2, [image(4, 4), image(4, 4).astype(np.float32)], ["a", "b"])
    with pytest.raises(ValueError, match="2 images for 1 cameras"):
        Dataset([cam(4, 4)], [image(4, 4)] * 2, ["a"])
    with pytest.raises(ValueError, match=r"masks\[0\].*bool"):
        Dataset([cam(4, 4)], [image(4, 4)], ["a"], masks=[np.ones((4, 4), np.uint8)])
    with pytest.raises(ValueError, match=r"masks\[0\].*size of images\[0\]"):
        Dataset([cam(4, 6)], [image(4, 6)], ["a"], masks=[np.ones((4, 6), bool)])
    with pytest.raises(ValueError, match=r"alphas\[0\]"):
        Dataset([cam(4, 6)], [image(4, 6)], ["a"], alphas=[None])
    with pytest.raises(ValueError, match="masks: 2 entries for 1 views"):
        Dataset([cam(4, 4)], [image(4, 4)], ["a"], masks=[None, None])
