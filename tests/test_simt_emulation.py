"""The SIMT rasterization kernel bodies, run on the host: tools/simt_emu runs
each threadgroup as fibers with SIMD operations and barriers as rendezvous,
and tools/simt_emu/raster_check.cpp bins a random scene as the GPU does (tile
cover, depth order) into deep tiles (several 256-splat chunks per list,
saturated pixels, partial tiles), renders it with the four forward passes
and the chunked backward, and against the sequential blend of
shaders/common/blend.h over the same lists. This checks the kernels' logic
(chunks, chaining, walks, checkpoints, lane roles, skips, reductions, the
deterministic pair slots) for every backward variant, and over several views
binned together as a batch of views is, with the host's arithmetic; the
GPUs' own arithmetic is the cuda / metal suites' job. Needs a C++17 compiler
(the one that builds the package) and POSIX ucontext (tests/_simt.py). The
other kernels of several views a step: tests/test_simt_views.py.
The fused loss's kernels run there too, against the CPU backend's schedule,
the fused Adam against adam_update element by element, the binning's
prefix sum and radix sort against the C++ standard library, the count of
non-finite parameters against std::isfinite, densification's gather against
numpy's repeat, and the MCMC strategy's kernels against splat.reference.mcmc."""
import os
import subprocess

import numpy as np
import pytest

from _parity import assert_images_close, rel_err
from _scenes import make_rng
from _simt import ROOT, compile_check, run_check

SOURCE = os.path.join(ROOT, "tools", "simt_emu", "raster_check.cpp")
ADAM_SOURCE = os.path.join(ROOT, "tools", "simt_emu", "adam_check.cpp")
SORT_SOURCE = os.path.join(ROOT, "tools", "simt_emu", "sort_check.cpp")
EMIT_SOURCE = os.path.join(ROOT, "tools", "simt_emu", "emit_check.cpp")
FINITE_SOURCE = os.path.join(ROOT, "tools", "simt_emu", "finite_check.cpp")
SH_GRAD_SOURCE = os.path.join(ROOT, "tools", "simt_emu", "sh_grad_check.cpp")
EXPOSURE_SOURCE = os.path.join(ROOT, "tools", "simt_emu", "exposure_check.cpp")
LOSS_SOURCES = [os.path.join(ROOT, *p) for p in (("tools", "simt_emu", "loss_check.cpp"),
                                                 ("cpp", "cpu", "cpu_loss.cpp"), ("cpp", "cpu", "thread_pool.cpp"))]
CHUNK = 256

# Backward specialization constants as -D defines. The kernel header's
# fallbacks are the design's first values; the BackendConfig default adds
# spread_lanes (docs/architecture.md), as the host does.
DEFAULT = ["SPLAT_SPEC_BWD_ATOMIC=SPLAT_BWD_ATOMIC_SPREAD_LANES"]
VARIANTS = {
    "default": DEFAULT,
    "lane_zero": ["SPLAT_SPEC_BWD_ATOMIC=SPLAT_BWD_ATOMIC_LANE_ZERO"],
    "original": DEFAULT + ["SPLAT_SPEC_BWD_REDUCE=SPLAT_BWD_REDUCE_ORIGINAL"],
    "tg": DEFAULT + ["SPLAT_SPEC_BWD_REDUCE=SPLAT_BWD_REDUCE_TG"],
    "sparse_off": DEFAULT + ["SPLAT_SPEC_BWD_SPARSE=SPLAT_BWD_SPARSE_OFF"],
    "range_full": DEFAULT + ["SPLAT_SPEC_BWD_RANGE=SPLAT_BWD_RANGE_FULL"],
    "deterministic": DEFAULT + ["SPLAT_SPEC_DETERMINISTIC=1"],
    # absgrad: the summed |d mean2d| per splat, against the sequential walk's.
    "absgrad": DEFAULT + ["SPLAT_SPEC_ABSGRAD=1"],
    "absgrad_lane_zero": ["SPLAT_SPEC_BWD_ATOMIC=SPLAT_BWD_ATOMIC_LANE_ZERO", "SPLAT_SPEC_ABSGRAD=1"],
    "absgrad_original": DEFAULT + ["SPLAT_SPEC_BWD_REDUCE=SPLAT_BWD_REDUCE_ORIGINAL", "SPLAT_SPEC_ABSGRAD=1"],
    "absgrad_tg": DEFAULT + ["SPLAT_SPEC_BWD_REDUCE=SPLAT_BWD_REDUCE_TG", "SPLAT_SPEC_ABSGRAD=1"],
    "absgrad_deterministic": DEFAULT + ["SPLAT_SPEC_DETERMINISTIC=1", "SPLAT_SPEC_ABSGRAD=1"],
    # Each pixel on its own thread (SPLAT_BWD_COMPACT=0, the A/B of the
    # default that gathers a chunk's live pixels onto the first threads), with
    # each way of reducing.
    "own_pixels": DEFAULT + ["SPLAT_BWD_COMPACT=0"],
    "own_pixels_lane_zero": ["SPLAT_SPEC_BWD_ATOMIC=SPLAT_BWD_ATOMIC_LANE_ZERO", "SPLAT_BWD_COMPACT=0"],
    "own_pixels_tg": DEFAULT + ["SPLAT_SPEC_BWD_REDUCE=SPLAT_BWD_REDUCE_TG", "SPLAT_BWD_COMPACT=0"],
    "own_pixels_range_full": DEFAULT + ["SPLAT_SPEC_BWD_RANGE=SPLAT_BWD_RANGE_FULL", "SPLAT_BWD_COMPACT=0"],
    "absgrad_deterministic_own_pixels": DEFAULT + ["SPLAT_SPEC_DETERMINISTIC=1", "SPLAT_SPEC_ABSGRAD=1",
                                                   "SPLAT_BWD_COMPACT=0"],
    # SIMD groups over 16x4 row strips (SPLAT_GROUP_QUADRANTS=0, the A/B of the
    # default's 8x8 quadrants), the same block test.
    "row_strips": DEFAULT + ["SPLAT_GROUP_QUADRANTS=0"],
}


def build(cxx, variant, out_dir):
    return compile_check(cxx, [SOURCE], os.path.join(out_dir, f"raster_check_{variant}"), VARIANTS[variant])


def run(exe, seed, splats, with_d_alpha, out, faint=False, skip=False, views=1, chunked=False):
    """views > 1: `splats` a view, the views binned together and stacked one below another;
    chunked: the chunked stop, against its own sequential blend."""
    p = subprocess.run([exe, str(seed), str(splats), str(int(with_d_alpha)), out, str(int(faint)), str(int(skip)),
                        str(views), str(int(chunked))], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    data = np.fromfile(out, np.uint8)
    width, height, n, pairs, deepest, skipped, walks, ended = (int(v) for v in data[:32].view(np.uint32))
    arrays, at = {"skipped": skipped, "walks": walks, "ended": ended}, 32
    for name, count, dtype in [("image", 3 * width * height, np.float32), ("ref_image", 3 * width * height, np.float32),
                               ("alpha", width * height, np.float32), ("ref_alpha", width * height, np.float32),
                               ("n_contrib", width * height, np.uint32), ("ref_n_contrib", width * height, np.uint32),
                               ("grads", 9 * n, np.float32), ("ref_grads", 9 * n, np.float32),
                               ("abs", 2 * n, np.float32), ("ref_abs", 2 * n, np.float32)]:
        arrays[name] = data[at:at + 4 * count].view(dtype)
        at += 4 * count
    assert at == len(data), "raster_check wrote an unexpected size"
    for k in ("image", "ref_image"):
        arrays[k] = arrays[k].reshape(height, width, 3)
    for k in ("alpha", "ref_alpha"):
        arrays[k] = arrays[k].reshape(height, width, 1)
    return arrays, pairs, deepest


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_raster_kernels_match_the_sequential_blend(compiler, tmp_path, variant):
    exe = build(compiler, variant, str(tmp_path))
    rng, seed = make_rng()
    splats = int(rng.integers(4200, 5000))
    with_d_alpha = bool(rng.random() < 0.5)
    got, pairs, deepest = run(exe, int(rng.integers(0, 2 ** 31)), splats, with_d_alpha, str(tmp_path / "out.bin"))
    assert deepest > 2 * CHUNK, f"the scene should have lists of 3+ chunks (deepest {deepest}); seed {seed}"
    assert np.count_nonzero(got["ref_n_contrib"]) > 0.9 * got["ref_n_contrib"].size, seed
    assert_matches_sequential_blend(got, pairs, seed)
    if variant.startswith("absgrad"):
        e = rel_err(got["abs"], got["ref_abs"])
        assert e <= 1e-4 and np.all(got["abs"] >= 0), f"absgrad: relative error {e:.3g}; seed {seed}"
        # |sum| <= sum |.| per splat (the two statistics' relation).
        g2 = got["ref_grads"].reshape(-1, 9)[:, :2].ravel()
        assert np.all(np.abs(g2) <= got["ref_abs"] * (1 + 1e-5) + 1e-12) and got["ref_abs"].sum() > np.abs(g2).sum()
    else:
        assert not np.any(got["abs"]), "abs_grads written without SPLAT_SPEC_ABSGRAD"


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["default", "deterministic", "own_pixels"])
def test_raster_kernels_on_views_binned_together(compiler, tmp_path, variant):
    # Three views of 72x56 (partial tiles at their right and bottom edges)
    # binned as one batch: view v's tiles from 3 v T, its pixels from v W H.
    # The reference blends each pixel through its own view's tile list with
    # the view's local pixel centre, so a kernel that took a tile's pixels or
    # rows from the wrong view, or from the global tile index, disagrees.
    exe = build(compiler, variant, str(tmp_path))
    rng, seed = make_rng()
    splats = int(rng.integers(1800, 2200))
    got, pairs, deepest = run(exe, int(rng.integers(0, 2 ** 31)), splats, bool(rng.random() < 0.5),
                              str(tmp_path / "out.bin"), skip=bool(rng.random() < 0.5), views=3)
    assert got["image"].shape == (3 * 56, 72, 3) and got["grads"].size == 9 * 3 * splats
    assert deepest > CHUNK, f"the scene should have lists of 2+ chunks (deepest {deepest}); seed {seed}"
    assert_matches_sequential_blend(got, pairs, seed)


@pytest.mark.slow
def test_raster_kernels_on_faint_deep_lists(compiler, tmp_path):
    # Pixels that rarely stop: last contributors 5+ chunks deep, so the
    # checkpoint sweep runs over more than one batch of its loads.
    exe = build(compiler, "default", str(tmp_path))
    rng, seed = make_rng()
    splats = int(rng.integers(12500, 13500))
    got, pairs, deepest = run(exe, int(rng.integers(0, 2 ** 31)), splats, bool(rng.random() < 0.5),
                              str(tmp_path / "out.bin"), faint=True)
    deep = int(np.count_nonzero(got["ref_n_contrib"] > 4 * CHUNK))
    assert deep > 100, f"only {deep} pixels with a last contributor past 4 chunks (deepest {deepest}); seed {seed}"
    assert_matches_sequential_blend(got, pairs, seed)


@pytest.mark.slow
@pytest.mark.parametrize("chunk_pass", ["default", "keeps_ended"])
def test_skipping_the_chunks_behind_a_saturated_one_changes_no_bit(compiler, tmp_path, chunk_pass):
    # BackendConfig.raster_forward_chunks = skip_saturated against every chunk
    # rasterized, on the same scene: the image, alpha, last contributors and
    # gradients agree to the bit, with chunks skipped; by default the head
    # launches also skip the pixels earlier chunks ended, with
    # SPLAT_CHUNK_SKIP_ENDED=0 none does.
    exe = build(compiler, "default", str(tmp_path))
    defines = {"default": [], "keeps_ended": ["SPLAT_CHUNK_SKIP_ENDED=0"]}[chunk_pass]
    variant = exe if not defines else compile_check(compiler, [SOURCE], str(tmp_path / f"raster_check_{chunk_pass}"),
                                                    VARIANTS["default"] + defines)
    rng, seed = make_rng()
    scene_seed, splats, with_d_alpha = int(rng.integers(0, 2 ** 31)), int(rng.integers(9000, 11000)), True
    # Both stops: with the 3DGS stop a walk recomputes a chunk from the records
    # and would hide a chunk state a skip got wrong; the chunked stop takes
    # each chunk's state whole.
    for chunked in (False, True):
        full, pairs, deepest = run(exe, scene_seed, splats, with_d_alpha, str(tmp_path / "full.bin"), chunked=chunked)
        skip, _, _ = run(variant, scene_seed, splats, with_d_alpha, str(tmp_path / "skip.bin"), skip=True,
                         chunked=chunked)
        assert skip["skipped"] > 0 and full["skipped"] == 0, f"no chunk skipped (deepest {deepest}); seed {seed}"
        # Pixels of a later chunk that the earlier ones had ended (counted as the
        # variant skips them).
        assert full["ended"] == 0, seed
        if chunk_pass == "default":
            assert skip["ended"] > 0, f"no pixel skipped as ended; seed {seed}"
        else:
            assert skip["ended"] == 0, seed
        for k in ("image", "alpha", "n_contrib", "grads", "abs"):
            np.testing.assert_array_equal(skip[k], full[k], err_msg=f"{k}; chunked {chunked}; seed {seed}")
        assert_matches_sequential_blend(skip, pairs, seed)


@pytest.mark.slow
@pytest.mark.parametrize("skip", [False, True])
def test_stopping_in_the_first_chunk_without_a_walk_changes_no_bit(compiler, tmp_path, skip):
    # The chunk pass applies the blend's stop in each list's first chunk (from
    # T = 1) against SPLAT_CHUNK_EXACT_FIRST=0, where those pixels walk it: the
    # same image, alpha, last contributors and gradients to the bit, with
    # fewer pixels walking.
    exact = build(compiler, "default", str(tmp_path))
    walked = compile_check(compiler, [SOURCE], str(tmp_path / "raster_check_walked"),
                           VARIANTS["default"] + ["SPLAT_CHUNK_EXACT_FIRST=0"])
    rng, seed = make_rng()
    scene_seed, splats = int(rng.integers(0, 2 ** 31)), int(rng.integers(9000, 11000))
    a, pairs, deepest = run(exact, scene_seed, splats, True, str(tmp_path / "exact.bin"), skip=skip)
    b, _, _ = run(walked, scene_seed, splats, True, str(tmp_path / "walked.bin"), skip=skip)
    assert deepest > 2 * CHUNK, f"the scene should have lists of 3+ chunks (deepest {deepest}); seed {seed}"
    # Most pixels of this scene stop, many of them in their first chunk.
    assert b["walks"] > 0.5 * b["n_contrib"].size and a["walks"] < 0.9 * b["walks"], \
        f"walks {a['walks']} against {b['walks']}; seed {seed}"
    for k in ("image", "alpha", "n_contrib", "grads", "abs"):
        np.testing.assert_array_equal(a[k], b[k], err_msg=f"{k}; seed {seed}")
    if skip:
        assert a["skipped"] >= b["skipped"] > 0, f"skipped {a['skipped']} against {b['skipped']}; seed {seed}"
    assert_matches_sequential_blend(a, pairs, seed)


@pytest.mark.slow
@pytest.mark.parametrize("variant,skip,views", [("default", False, 1), ("default", True, 1),
                                                ("deterministic", False, 3)])
def test_the_chunked_stop_matches_its_sequential_blend(compiler, tmp_path, variant, skip, views):
    # RasterParams::chunk_stop (train.blend_stop = "chunk"): no walk pass; the
    # kernels against each chunk blended from T = 1 with the blend's own step
    # and chained (raster_check.cpp). On the same scene the 3DGS stop ends
    # most pixels earlier: the two rules must differ where pixels stop past
    # their first chunk, and agree on the pixels that stop in it.
    exe = build(compiler, variant, str(tmp_path))
    rng, seed = make_rng()
    scene_seed, splats = int(rng.integers(0, 2 ** 31)), int(rng.integers(9000, 11000)) // views
    chunk, pairs, deepest = run(exe, scene_seed, splats, True, str(tmp_path / "chunk.bin"), skip=skip, views=views,
                                chunked=True)
    plain, _, _ = run(exe, scene_seed, splats, True, str(tmp_path / "plain.bin"), skip=skip, views=views)
    depth = 2 if views == 1 else 1  # chunks past the first the scene's lists reach
    assert deepest > depth * CHUNK, f"lists of {depth + 1}+ chunks expected (deepest {deepest}); seed {seed}"
    assert chunk["walks"] == 0 and plain["walks"] > 0, seed
    if skip:  # head launches skip the pixels the earlier chunks ended
        assert chunk["ended"] > 0 and plain["ended"] > 0, (chunk["ended"], plain["ended"], seed)
    assert_matches_sequential_blend(chunk, pairs, seed)
    later = plain["ref_n_contrib"] > CHUNK
    first = (plain["ref_n_contrib"] <= CHUNK) & (chunk["ref_n_contrib"] <= CHUNK)
    moved = int(np.count_nonzero(chunk["ref_n_contrib"][later] != plain["ref_n_contrib"][later]))
    assert moved > 0.5 * np.count_nonzero(later) > 0, f"{moved} of {np.count_nonzero(later)}; seed {seed}"
    assert np.array_equal(chunk["n_contrib"][first], plain["n_contrib"][first]), seed
    # The rules part only where a pixel blends past its 3DGS stop, which the
    # first chunk never lets it do.
    same = (chunk["ref_n_contrib"] == plain["ref_n_contrib"]).reshape(chunk["ref_image"].shape[:2])
    assert np.abs(chunk["ref_image"] - plain["ref_image"])[same].max() <= 1e-6, seed
    assert np.all(chunk["ref_n_contrib"].reshape(same.shape)[~same] > CHUNK), seed
    if skip:
        assert chunk["skipped"] > 0, f"no chunk skipped; seed {seed}"


@pytest.mark.slow
def test_gathering_the_walking_pixels_changes_no_bit(compiler, tmp_path):
    # The walk pass with its walking pixels gathered onto the first threads
    # (the default) against each pixel on its own thread (SPLAT_WALK_COMPACT=0):
    # the same image, alpha, last contributors and gradients to the bit, on a
    # scene where many pixels walk, from chunks past the first.
    gathered = build(compiler, "default", str(tmp_path))
    own = compile_check(compiler, [SOURCE], str(tmp_path / "raster_check_own"),
                        VARIANTS["default"] + ["SPLAT_WALK_COMPACT=0"])
    rng, seed = make_rng()
    scene_seed, splats = int(rng.integers(0, 2 ** 31)), int(rng.integers(9000, 11000))
    a, pairs, deepest = run(gathered, scene_seed, splats, True, str(tmp_path / "gathered.bin"))
    b, _, _ = run(own, scene_seed, splats, True, str(tmp_path / "own.bin"))
    assert deepest > 2 * CHUNK and a["walks"] > 0.1 * a["n_contrib"].size, \
        f"walks {a['walks']}, deepest list {deepest}; seed {seed}"
    for k in ("image", "alpha", "n_contrib", "grads", "abs"):
        np.testing.assert_array_equal(a[k], b[k], err_msg=f"{k}; seed {seed}")
    assert_matches_sequential_blend(a, pairs, seed)


def assert_matches_sequential_blend(got, pairs, seed):
    assert_images_close(got["image"], got["ref_image"], "image", seed)
    assert_images_close(got["alpha"], got["ref_alpha"], "alpha", seed)
    # The stop (T < 1e-4) sees T as chained chunk products, the sequential
    # blend as a running product: a pixel within rounding of it may differ.
    mismatched = int(np.count_nonzero(got["n_contrib"] != got["ref_n_contrib"]))
    assert mismatched <= max(2, got["n_contrib"].size // 1000), f"{mismatched} last contributors differ; seed {seed}"
    e = rel_err(got["grads"], got["ref_grads"])
    assert e <= 1e-4, f"gradients: relative error {e:.3g} ({pairs} pairs); seed {seed}"


@pytest.mark.parametrize("masked", [None, 0.3, 1.0])
def test_loss_kernels_give_the_cpu_schedule_bits(compiler, tmp_path, masked):
    """ssim_forward + ssim_backward (train_loss.h) against cpp/cpu/cpu_loss.cpp:
    the same gradient bits and the loss to rounding, on an image that is not
    a multiple of the 16-pixel tiles; with a mask (some of the pixels, or all),
    masked pixels' gradients are +0 on both."""
    exe = compile_check(compiler, LOSS_SOURCES, str(tmp_path / "loss_check"))
    rng, seed = make_rng()
    width, height = int(rng.integers(20, 90)), int(rng.integers(20, 90))
    got = run_check(exe, int(rng.integers(0, 2 ** 31)), width, height, *([] if masked is None else [masked]))
    assert int(got["masked_grad_nonzero"]) == 0, got
    if masked == 1.0:  # every pixel masked: loss 0, gradient 0
        assert int(got["valid_pixels"]) == 0 and float(got["cpu_loss"]) == float(got["gpu_loss"]) == 0.0, got
        assert int(got["grad_differ"]) == 0 and float(got["grad_max"]) == 0.0, got
        return
    if masked is not None:
        assert 0 < int(got["valid_pixels"]) < width * height, got
    # The mean over pixels is summed in another order (tiles, then the tiles'
    # sums), so the loss agrees to rounding; the gradient, per pixel, to the bit.
    cpu_loss, gpu_loss = float(got["cpu_loss"]), float(got["gpu_loss"])
    assert abs(gpu_loss - cpu_loss) <= 4e-6 * abs(cpu_loss), (got, seed)
    assert int(got["grad_values"]) == 3 * width * height, got
    assert int(got["grad_differ"]) == 0, (got, width, height, seed)
    assert float(got["grad_max"]) > 0.0, got


@pytest.mark.parametrize("sh_width", [3, 12, 27, 48])
def test_adam_kernel_updates_every_element_as_adam_update(compiler, tmp_path, sh_width):
    """adam_body (train_optim.h: a thread per 16-byte quad of each group, the
    groups' partial last quads element by element, the SH gradient expanded
    from its factors) against adam_update over every element: the same bits,
    for Gaussian counts that leave every kind of partial quad."""
    exe = compile_check(compiler, [ADAM_SOURCE], str(tmp_path / "adam_check"))
    rng, seed = make_rng()
    for n in (1, 2, 3, int(rng.integers(4, 700))):
        k_count = int(rng.integers(1, sh_width // 3 + 1))
        got = run_check(exe, int(rng.integers(0, 2 ** 31)), n, sh_width, k_count)
        assert int(got["values"]) == 3 * n * (11 + sh_width), got
        assert int(got["differ"]) == 0, (got, n, k_count, seed)
        # A skipped step (every radius -1: its pairs did not fit) changes no bit.
        assert int(got["skip_changed"]) == 0, (got, n, seed)
        # The SH gradient in full (data-parallel) steps as its factors do, to the bit.
        assert int(got["full_differ"]) == 0, (got, n, seed)
        # Three views' factor sets (several views a step) step as their expansions
        # summed view by view (accumulate_view) and given in full, to the bit.
        assert int(got["views_differ"]) == 0, (got, n, k_count, seed)
        # bfloat16 moments, packed: the kernel's words and parameters are the reference's
        # (adam_update_bf16 with each element's noise), to the bit; the v halves moved
        # (v is 0.01 x uniform, g ~ N(0, 1): (1 - beta2) g^2 is a visible change in most;
        # over 1500 runs of 1-3 Gaussians at least 27% moved, and 24% once in a run with one
        # Gaussian's 59: an eighth leaves room for such small counts).
        assert int(got["bf16_differ"]) == 0, (got, n, k_count, seed)
        assert int(got["bf16_v_changed"]) > int(got["values"]) // 3 // 8, (got, n, seed)
    # visible_only (train.visible_adam): the unseen Gaussians' parameters and moments
    # stay to the bit, the seen ones step as above; quads that straddle both included.
    for n, share in ((1, 0.0), (7, 0.5), (int(rng.integers(64, 700)), 0.3), (int(rng.integers(64, 700)), 0.9)):
        k_count = int(rng.integers(1, sh_width // 3 + 1))
        got = run_check(exe, int(rng.integers(0, 2 ** 31)), n, sh_width, k_count, share)
        assert int(got["differ"]) == 0, (got, n, share, seed)
        assert int(got["full_differ"]) == 0, (got, n, share, seed)
        assert int(got["bf16_differ"]) == 0, (got, n, share, seed)
        assert (int(got["unseen"]) == n) if share == 0.0 else 0 < int(got["unseen"]) < n or n < 10, got


def test_exposure_kernels_match_the_shared_math(compiler, tmp_path):
    """exposure_apply / _backward / _reduce / _adam / _center (train_exposure.h)
    against loops over exposure.h and adam.h: the corrected image, A^T d_image and
    the Adam step to the bit, the tree-summed gradient to float rounding of a
    float64 sum, on pixel counts that leave a partial last threadgroup; the
    centring's mean at the identity and the views' differences kept, with more
    views than a threadgroup's threads (its strided sum)."""
    exe = compile_check(compiler, [EXPOSURE_SOURCE], str(tmp_path / "exposure_check"))
    rng, seed = make_rng()
    for pixels, views in ((1, 1), (int(rng.integers(300, 5000)), int(rng.integers(2, 9))),
                          (int(rng.integers(1, 300)), int(rng.integers(257, 700)))):
        got = run_check(exe, int(rng.integers(0, 2 ** 31)), pixels, views)
        assert int(got["apply_differ"]) == 0 and int(got["image_grad_differ"]) == 0, (got, seed)
        assert float(got["grad_rel_err"]) < 1e-5, (got, seed)
        assert int(got["adam_differ"]) == 0, (got, seed)
        assert int(got["adam_views_differ"]) == 0, (got, seed)   # all_views: every view's own gradient
        # Every view's parameters step (the trained view's by its gradient,
        # the others by their momentum alone).
        assert int(got["adam_moved"]) == int(got["adam_values"]) == 12 * views, (got, seed)
        # A step whose pairs did not fit (radius[0] = -1) leaves every correction and moment as it was.
        assert int(got["skip_kept"]) == 1, (got, seed)
        # Centring: float32 sums of up to 700 values near 1 (rounding ~1e-7 each).
        assert float(got["center_mean_err"]) < 2e-6, (got, seed)
        assert float(got["center_diff_err"]) < 1e-6, (got, seed)
        assert int(got["center_skip_kept"]) == 1, (got, seed)


@pytest.mark.parametrize("piece", [16, 3])
@pytest.mark.parametrize("deterministic", [0, 1])
def test_pair_emission_matches_the_serial_walk(compiler, tmp_path, piece, deterministic):
    """emit_pairs_body against the serial walk over each Gaussian's covered
    tiles in depth order: the same keys, values and (deterministic variant)
    per-Gaussian slot ranges, with splats of hundreds of tiles (written piece
    by piece by several threads), radius-0 splats, counts a few off the cover
    (surplus dropped, sentinels filled), a partial last threadgroup and a grid
    over a capacity above the count. Pieces of 3 slots put most Gaussians in
    pieces, with piece boundaries inside rows, at row ends and between
    Gaussians. The other variant leaves the ranges, which only the
    deterministic backward reads, unwritten."""
    exe = compile_check(compiler, [EMIT_SOURCE], str(tmp_path / "emit_check"),
                        [f"SPLAT_EMIT_PIECE={piece}u", f"SPLAT_SPEC_DETERMINISTIC={deterministic}"])
    rng, seed = make_rng()
    # One view, and the records of each of 3 views binned together (keys from their view's tiles).
    for count, views in ((1, 1), (int(rng.integers(700, 3000)), 1), (int(rng.integers(300, 1000)), 3)):
        got = {k: int(v) for k, v in run_check(exe, int(rng.integers(0, 2 ** 31)), count, views).items()}
        assert got["keys_differ"] == got["values_differ"] == got["ranges_differ"] == 0, (got, count, seed)
        if count > 1:
            assert got["large"] > 20 and got["pairs"] > 10 * count * views, (got, views, seed)
            # Both roles ran: Gaussians emitted whole by their rank's thread and in pieces.
            assert 0 < got["in_pieces"] < count * views, (got, seed)


@pytest.mark.parametrize("staged", [0, 1], ids=["direct", "staged"])
@pytest.mark.parametrize("key_bits", [8, 12, 32])
def test_scan_and_radix_sort_match_the_standard_library(compiler, tmp_path, key_bits, staged):
    """exclusive_scan (scan.h) and the stable radix sort (radix_sort.h),
    dispatched as GpuDevice does, against std::partial_sum and
    std::stable_sort on keys with many repeated digits: 1 key and a random
    count over several blocks; the scatter storing each key at its slot, and
    staging the block in threadgroup memory first (SPLAT_SORT_STAGED)."""
    exe = compile_check(compiler, [SORT_SOURCE], str(tmp_path / "sort_check"), [f"SPLAT_SORT_STAGED={staged}"])
    rng, seed = make_rng()
    for count in (1, int(rng.integers(2, 9000))):
        got = run_check(exe, int(rng.integers(0, 2 ** 63)), count, key_bits)
        assert int(got["scan_differ"]) == 0, (got, count, seed)
        assert int(got["sort_differ"]) == 0, (got, count, key_bits, seed)
        # A count only the device holds (the pairs sized on the device), and
        # pair_total's status against the host's exact total.
        assert int(got["limited_differ"]) == 0, (got, count, key_bits, seed)
        assert int(got["pair_total_differ"]) == 0, (got, count, seed)


@pytest.mark.parametrize("sh_stride", [1, 4, 9, 16])
def test_sh_gradient_expansion_matches_its_factors(compiler, tmp_path, sh_stride):
    """expand_sh_grad_body (project.h: a thread per 16-byte quad of d_sh, the partial
    last quad float by float) against sh_factor_grad over every element (with several
    views' factor sets, their values summed by accumulate_view): the same bits,
    zeros past the active coefficients, nothing written past the array; Gaussian counts
    whose arrays end on every remainder of a quad."""
    exe = compile_check(compiler, [SH_GRAD_SOURCE], str(tmp_path / "sh_grad_check"))
    rng, seed = make_rng()
    for n in (1, 2, 3, int(rng.integers(4, 900))):
        k_count = int(rng.integers(1, sh_stride + 1))
        # One factor set, and several views' sets (their mean, as accumulate_view sums them).
        for views in ((), (1,), (2,), (int(rng.integers(3, 9)),)):
            got = run_check(exe, int(rng.integers(0, 2 ** 31)), n, sh_stride, k_count, *views)
            assert int(got["values"]) == 3 * n * sh_stride, got
            assert int(got["differ"]) == 0, (got, n, k_count, views, seed)
            assert int(got["past_end"]) == 0, (got, n, views, seed)
            assert int(got["nonzero"]) > 0, (got, views, seed)


@pytest.mark.parametrize("sh_width", [3, 48])
def test_nonfinite_count_kernels_match_isfinite(compiler, tmp_path, sh_width):
    """count_nonfinite + nonfinite_total (train_check.h), dispatched with one
    threadgroup and with several striding over arrays longer than the grid,
    against std::isfinite over every element: NaNs and infinities of both
    signs counted, FLT_MAX, subnormals and -0 not."""
    exe = compile_check(compiler, [FINITE_SOURCE], str(tmp_path / "finite_check"))
    rng, seed = make_rng()
    for n, groups in ((1, 1), (int(rng.integers(2, 400)), 1), (int(rng.integers(400, 1500)), int(rng.integers(2, 7)))):
        got = run_check(exe, int(rng.integers(0, 2 ** 31)), n, sh_width, groups)
        for a in range(5):
            assert got[f"got{a}"] == got[f"want{a}"], (a, got, n, groups, seed)
            assert int(got[f"want{a}"]) > 0, (a, got, seed)   # the check plants one in every array


def test_scan_total_is_exact_past_two_to_the_32(compiler, tmp_path):
    """The pair count's scan past 2^32 (GpuDevice::scanned_total): block sums
    saturate instead of wrapping, so the host's total from the scanned block
    offsets is exact wherever no block reaches 2^32 - 1 and a lower bound past
    the pair limit where one does: a wrapped total (2^32 pairs read as 0) would
    let emission write out of bounds."""
    exe = compile_check(compiler, [SORT_SOURCE], str(tmp_path / "sort_check"))
    rng, seed = make_rng()

    def run(count, values):
        got = {k: int(v) for k, v in run_check(exe, int(rng.integers(0, 2 ** 63)), count, "8", values).items()}
        # pair_total on the device agrees with the host's total past 2^32 and when saturated.
        assert got["pair_total_differ"] == 0, (got, seed)
        return got

    # Random counts below 1.5 x 2^20 (a 16384^2 image has 2^20 tiles): block
    # sums ~0.75 x 2^32, totals past 2^32.
    count = int(rng.integers(3 * 4096, 5 * 4096))
    got = run(count, str(3 * 2 ** 19))
    assert got["exact"] > 2 ** 32 and got["max_block"] < 2 ** 32 - 1, (got, seed)
    assert got["saturated"] == 0 and got["total"] == got["exact"] and got["scan_differ"] == 0, (got, seed)
    # One block one below 2^32: exact; a block of exactly 2^32 (4096 x 2^20): saturated, past the limit.
    got = run(4096, "=" + str(2 ** 20 - 1))
    assert got["saturated"] == 0 and got["total"] == 4096 * (2 ** 20 - 1), got
    got = run(4096, "=" + str(2 ** 20))
    assert got["saturated"] == 1 and 2 ** 32 - 1 == got["total"] < got["exact"] == 2 ** 32, got
    # Far past: every block saturated, the total still past 2^32.
    got = run(count, str(2 ** 28))
    assert got["saturated"] == 1 and 2 ** 32 <= got["total"] <= got["exact"], (got, seed)


# ----------------------------------------------------------------------------- densification's gather
DENSIFY_SOURCE = os.path.join(ROOT, "tools", "simt_emu", "densify_check.cpp")


def test_densify_gather_matches_numpy_repeat(compiler, tmp_path):
    """train_densify.h's gather (each output row's source, then a float a thread)
    dispatched as GpuDevice::densify does, for every array width and kind (a
    parameter, the log-scales, a moment), on random kept / clone / split rows with
    pruning: every output row, to the bit, against numpy's repeat of the source
    rows section by section (kept, clones, children), with the children's
    log-scales shifted by -log(divisor) and the new rows' moments zero."""
    exe = compile_check(compiler, [DENSIFY_SOURCE], str(tmp_path / "densify_check"))
    rng, seed = make_rng()
    for width in (1, 3, 4, 48):
        for is_log_scales, is_moment in ((0, 0), (1, 0), (0, 1)):
            n = int(rng.integers(300, 3000))
            split_count = int(rng.integers(2, 5))
            kind = rng.choice(3, n, p=[0.8, 0.1, 0.1])           # keep, clone, split
            pruned = rng.random(n) < 0.15
            counts = np.concatenate([(kind != 2) & ~pruned, (kind == 1) & ~pruned,
                                     np.where((kind == 2) & ~pruned, split_count, 0)]).astype(np.uint32)
            offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.uint32)
            src = rng.normal(0.0, 1.0, (n, width)).astype(np.float32)
            log_div = np.float32(np.log(rng.uniform(1.2, 2.0)))
            head = np.array([n, split_count, width, is_log_scales, is_moment], np.uint32).tobytes()
            (tmp_path / "in.bin").write_bytes(head + log_div.tobytes() + offsets.tobytes() + src.tobytes())
            p = subprocess.run([exe, str(tmp_path / "in.bin"), str(tmp_path / "out.bin")], capture_output=True,
                               text=True, timeout=600)
            assert p.returncode == 0, p.stderr[-4000:]
            got = np.fromfile(tmp_path / "out.bin", np.float32).reshape(-1, width)
            new_rows = np.zeros_like(src) if is_moment else src
            children = new_rows - log_div if is_log_scales else new_rows
            want = np.concatenate([np.repeat(src, counts[:n], axis=0), np.repeat(new_rows, counts[n:2 * n], axis=0),
                                   np.repeat(children, counts[2 * n:], axis=0)])
            assert got.shape == want.shape and int(offsets[-1]) == len(want), (width, seed)
            assert np.array_equal(got, want), (width, is_log_scales, is_moment, seed)


# ----------------------------------------------------------------------------- the MCMC strategy
MCMC_SOURCE = os.path.join(ROOT, "tools", "simt_emu", "mcmc_check.cpp")


def run_mcmc_check(exe, tmp_path, state, n, add, seed, step, mode, min_opacity=0.005, noise_scale=0.0,
                   weights=(0.0, 0.0), grads=None):
    from splat.reference.mcmc import PARAMS
    sh_width = state["sh"].reshape(n, -1).shape[1]
    arrays = [state[k] for k in PARAMS] + [state["adam_m." + k] for k in PARAMS] + \
        [state["adam_v." + k] for k in PARAMS]
    header = np.array([n, add, sh_width, seed, step, mode], np.uint32).tobytes() + \
        np.array([min_opacity, noise_scale, *weights], np.float32).tobytes()
    body = b"".join(np.ascontiguousarray(a, np.float32).tobytes() for a in arrays)
    if grads is not None:
        body += b"".join(np.ascontiguousarray(g, np.float32).tobytes() for g in grads)
    (tmp_path / "in.bin").write_bytes(header + body)
    p = subprocess.run([exe, str(tmp_path / "in.bin"), str(tmp_path / "out.bin")], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    data = np.fromfile(tmp_path / "out.bin", np.uint8)
    relocated = int(data[:4].view(np.uint32)[0])
    floats = data[4:].view(np.float32)
    if mode == 2:
        return relocated, floats[:3 * n].reshape(n, 3), floats[3 * n:]
    rows, out, at = n + add, {}, 0
    for i, a in enumerate(arrays):
        size = rows * int(np.prod(a.shape[1:]))
        name = ("", "adam_m.", "adam_v.")[i // 5] + PARAMS[i % 5]
        out[name] = floats[at:at + size].reshape((rows,) + a.shape[1:])
        at += size
    if mode == 0:  # each pass's sampling weights (relocation, then growth when add > 0)
        words = data[4 + 4 * at:].view(np.uint32)
        out["weights"] = tuple(words[k * n:(k + 1) * n] for k in range(1 + (add > 0)))
    return relocated, out


@pytest.mark.parametrize("sizes", [(700, 1300), (65600, 67000)], ids=["blocks", "runs"])
def test_mcmc_kernels_match_numpy(compiler, tmp_path, sizes):
    """train_mcmc.h dispatched as GpuDevice does, on a constructed scene
    (several weight blocks; past 256 blocks, runs of blocks per thread of the
    offsets pass; dead Gaussians, sources sampled several times): the refine
    against splat.reference.mcmc row for row (the block offsets, the two-level
    search and the apply order), the noise and the regularisers."""
    from splat.reference import mcmc as ref
    from test_mcmc import assert_noise_matches, assert_refined, constructed_state
    exe = compile_check(compiler, [MCMC_SOURCE], str(tmp_path / "mcmc_check"))
    rng, seed = make_rng()
    n = int(rng.integers(*sizes))
    state = constructed_state(rng, n, int(rng.integers(n // 20, n // 8)))
    add, key, step = int(1.05 * n) - n, int(rng.integers(0, 2 ** 31)), int(rng.integers(1, 30000))
    relocated, got = run_mcmc_check(exe, tmp_path, state, n, add, key, step, 0)
    # The weights: floor(sigmoid * 2^24) of the live, within a unit or two of numpy's (the
    # sigmoid's last bit); the refine is then held to the reference exactly on the kernels' own
    # weights, since a shifted prefix moves the samples that fall within a few units of a boundary.
    w_relocate = ref.weights(np.asarray(state["opacity_logits"], np.float32), 0.005, True).astype(np.int64)
    assert len(got["weights"]) == 2 and np.abs(got["weights"][0].astype(np.int64) - w_relocate).max() <= 2, seed
    assert np.array_equal(got["weights"][0] == 0, w_relocate == 0), seed
    want, want_relocated = ref.refine(state, 0.005, add, key, step, weights_given=got["weights"])
    assert relocated == want_relocated > 0, seed
    assert_refined(got, want, n, f"emulated kernels, seed {seed}")

    scale = float(rng.uniform(5.0, 50.0))
    _, got = run_mcmc_check(exe, tmp_path, state, n, 0, key, step, 1, noise_scale=scale)
    want = ref.position_noise(state["means"], state["log_scales"], state["quats"], state["opacity_logits"], scale,
                              key, step)
    assert_noise_matches(got["means"], state["means"], want, f"emulated noise, seed {seed}")

    wo, ws = float(rng.uniform(0.01, 0.1)), float(rng.uniform(0.01, 0.1))
    g_ls, g_o = rng.normal(0, 1e-3, (n, 3)), rng.normal(0, 1e-3, n)
    _, got_ls, got_o = run_mcmc_check(exe, tmp_path, state, n, 0, key, step, 2, weights=(wo / n, ws / (3 * n)),
                                      grads=(g_ls, g_o))
    d_o, d_s = ref.regularizer_grads(state["opacity_logits"], state["log_scales"], wo, ws)
    np.testing.assert_allclose(got_o, g_o + d_o, rtol=1e-5, atol=1e-10)
    np.testing.assert_allclose(got_ls, g_ls + d_s, rtol=1e-5, atol=1e-10)
