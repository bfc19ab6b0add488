"""The Metal backend (the shared SIMT kernels through Metal, function
constants, splat.metallib or the embedded source) against the numpy
reference, the CPU backend, and itself across every BackendConfig variant:
the same checks, tolerances and fixtures as tests/test_cuda.py, plus the
Metal-only paths (the run-time compiled library against the metallib, the
pipeline cache under concurrent use, profile reflection).

Tolerances as in test_parity_cpu.py: images to 1e-5 except a tiny fraction of
"flipped" pixels (float32 on either side of a threshold: alpha < 1/255,
T < 1e-4, sigma >= 5.55, a tile-rect edge -- at most 0.5% of pixels, at least
2), gradients norm-wise to 1e-3 per array. Variants of the backward differ
only in the order of float atomics: they agree with the default to 1e-4, and
bit for bit on the single-pixel fixture, where exactly one pixel has a
non-zero gradient (all other contributions are exact zeros).
"""
import itertools
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import splat
from splat import _core
from _scenes import make_rng, random_scene

pytestmark = pytest.mark.metal

_ok, _why = splat.backend_available("metal")
if not _ok:
    pytest.skip(f"Metal backend not available: {_why}", allow_module_level=True)

from splat import reference  # noqa: E402

IMAGE_TOL = 1e-5
FLIP_FRACTION = 0.005
GRAD_TOL = 1e-3
VARIANT_TOL = 1e-4
GRADS = ("means", "log_scales", "quats", "opacity_logits", "sh", "means2d")

VARIANTS = [dict(raster_backward=a, raster_backward_range=b, raster_backward_sparse=c, raster_backward_atomic=d)
            for a, b, c, d in itertools.product(("simd", "tg", "original"), ("last_contributor", "full_range"),
                                                ("warp_any", "off"), ("lane_zero", "spread_lanes"))]
VARIANTS += [dict(deterministic=True, raster_backward_range=r) for r in ("last_contributor", "full_range")]


def variant_id(v):
    return "-".join(str(x) for x in v.values())


def to_splat(scene):
    f = lambda a: np.ascontiguousarray(a, dtype=np.float32)
    g = splat.Gaussians(f(scene.means), f(scene.log_scales), f(scene.quats), f(scene.opacity_logits), f(scene.sh))
    cam = splat.Camera(f(scene.world_to_camera), scene.fx, scene.fy, scene.cx, scene.cy, scene.width, scene.height)
    return g, cam


def metal(**fields):
    return splat.Rasterizer(splat.BackendConfig(backend="metal", **fields))


def reference_of(g, cam, degree, bg):
    return reference.forward(g.means, g.log_scales, g.quats, g.opacity_logits, g.sh, cam.world_to_camera,
                             cam.fx, cam.fy, cam.cx, cam.cy, cam.width, cam.height, degree, bg)


def assert_images_close(got, want, what, seed):
    err = np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64))
    err = err.reshape(err.shape[0], err.shape[1], -1).max(axis=2)
    bad = int(np.count_nonzero(err > IMAGE_TOL))
    allowed = max(2, int(FLIP_FRACTION * err.size))
    assert bad <= allowed, f"{what}: {bad} pixels differ by > {IMAGE_TOL} (max {err.max():.3g}); seed {seed}"


def rel_err(got, want):
    want = np.asarray(want, np.float64)
    return np.linalg.norm(np.asarray(got, np.float64) - want) / max(np.linalg.norm(want), 1e-12)


def put_behind_camera(scene, rng, fraction=0.1):
    W = scene.world_to_camera
    t = scene.means @ W[:3, :3].T + W[:3, 3]
    pick = rng.random(len(t)) < fraction
    t[pick, 2] *= -1.0
    scene.means[:] = (t - W[:3, 3]) @ W[:3, :3]


CASES = [  # (n, width, height, sh_degree): sizes mostly not tile multiples
    (1, 37, 53, 0),
    (12, 17, 16, 1),
    (150, 37, 53, 2),
    (400, 128, 96, 3),
    (3000, 131, 97, 3),
    (700, 61, 47, 1),
    (20000, 300, 200, 3),
]


def scene_for(rng, n, width, height, degree):
    extra = (degree + 2) ** 2 - (degree + 1) ** 2 if degree < 3 and rng.random() < 0.5 else 0
    scene = random_scene(rng, n=n, sh_degree=degree, width=width, height=height, extra_sh=extra,
                         spread=1.6, depth=(2.0, 6.0), pixel_sigma=(0.5, 6.0))
    if n > 1:
        put_behind_camera(scene, rng)
    return scene


def test_description_names_the_device_and_the_kernel_library():
    r = metal()
    assert r.backend == "metal"
    d = r._native.description
    assert d.startswith("metal (") and "kernels:" in d, d


def test_auto_picks_metal_on_macos():
    if sys.platform != "darwin":
        pytest.skip("backend='auto' prefers Metal on macOS only")
    assert splat.Rasterizer(splat.BackendConfig(backend="auto")).backend == "metal"


@pytest.mark.parametrize("n,width,height,degree", CASES)
def test_matches_reference_and_cpu(n, width, height, degree):
    rng, seed = make_rng()
    g, cam = to_splat(scene_for(rng, n, width, height, degree))
    bg = rng.uniform(0, 1, 3).astype(np.float32)
    r = metal()
    out = r.forward(g, cam, degree, bg)
    cpu = splat.Rasterizer(splat.BackendConfig(backend="cpu"))
    cpu_out = cpu.forward(g, cam, degree, bg)
    ref = reference_of(g, cam, degree, bg) if n <= 3000 else None

    assert out.image.shape == (height, width, 3) and out.alpha.shape == (height, width)
    assert_images_close(out.image, cpu_out.image, "image vs cpu", seed)
    assert_images_close(out.alpha[..., None], cpu_out.alpha[..., None], "alpha vs cpu", seed)
    assert np.count_nonzero(out.radii != cpu_out.radii) <= max(1, n // 200), seed
    if ref is not None:
        assert_images_close(out.image, ref.image, "image vs reference", seed)
        assert_images_close(out.alpha[..., None], ref.alpha[..., None], "alpha vs reference", seed)

    d_image = rng.normal(size=out.image.shape).astype(np.float32)
    d_alpha = rng.normal(size=out.alpha.shape).astype(np.float32)
    grads = r.backward(d_image, d_alpha)
    cpu_grads = cpu.backward(d_image, d_alpha)
    ref_grads = reference.backward(ref, d_image, d_alpha) if ref is not None else None
    for name in GRADS:
        got = getattr(grads, name)
        assert got.shape == getattr(cpu_grads, name).shape, name
        assert np.all(np.isfinite(got)), (name, seed)
        e = rel_err(got, getattr(cpu_grads, name))
        assert e <= GRAD_TOL, f"{name} vs cpu: relative error {e:.3g}; seed {seed}"
        if ref_grads is not None:
            e = rel_err(got, getattr(ref_grads, name))
            assert e <= GRAD_TOL, f"{name} vs reference: relative error {e:.3g}; seed {seed}"


def test_backward_without_d_alpha_and_white_background():
    rng, seed = make_rng()
    g, cam = to_splat(scene_for(rng, 500, 70, 45, 2))
    bg = np.ones(3, np.float32)
    r, cpu = metal(), splat.Rasterizer(splat.BackendConfig(backend="cpu"))
    out, cpu_out = r.forward(g, cam, 2, bg), cpu.forward(g, cam, 2, bg)
    assert_images_close(out.image, cpu_out.image, "image", seed)
    d_image = rng.normal(size=out.image.shape).astype(np.float32)
    grads, cpu_grads = r.backward(d_image), cpu.backward(d_image)
    for name in GRADS:
        assert rel_err(getattr(grads, name), getattr(cpu_grads, name)) <= GRAD_TOL, (name, seed)


@pytest.mark.parametrize("variant", VARIANTS, ids=variant_id)
def test_every_backward_variant_matches_the_default(variant):
    rng, seed = make_rng()
    g, cam = to_splat(scene_for(rng, 4000, 157, 109, 3))
    bg = rng.uniform(0, 1, 3).astype(np.float32)
    d_image = rng.normal(size=(109, 157, 3)).astype(np.float32)
    d_alpha = rng.normal(size=(109, 157)).astype(np.float32)
    base = metal()
    base_out = base.forward(g, cam, 3, bg)
    want = base.backward(d_image, d_alpha)
    r = metal(**variant)
    out = r.forward(g, cam, 3, bg)
    assert np.array_equal(out.image, base_out.image), "the forward does not depend on backward switches"
    got = r.backward(d_image, d_alpha)
    for name in GRADS:
        e = rel_err(getattr(got, name), getattr(want, name))
        assert e <= VARIANT_TOL, f"{variant_id(variant)} {name}: relative error {e:.3g}; seed {seed}"


def single_pixel_fixture(seed=None):
    """>= 24 splats overlapping the image centre; d_image non-zero at that pixel only."""
    rng, seed = make_rng(seed)
    scene = random_scene(rng, n=40, sh_degree=2, width=40, height=37, spread=0.05, depth=(3.0, 5.0),
                         pixel_sigma=(3.0, 6.0), logits=(-3.0, -1.0))
    g, cam = to_splat(scene)
    bg = rng.uniform(0, 1, 3).astype(np.float32)
    d_image = np.zeros((37, 40, 3), np.float32)
    px, py = 20, 18
    d_image[py, px] = rng.normal(size=3).astype(np.float32)
    return g, cam, bg, d_image, (px, py), seed


def grads_bytes(variant, g, cam, bg, d_image):
    r = metal(**variant)
    r.forward(g, cam, 2, bg)
    grads = r.backward(d_image)
    return {name: getattr(grads, name).tobytes() for name in GRADS}, grads


def test_single_pixel_fixture_is_bit_exact_across_switches():
    g, cam, bg, d_image, (px, py), seed = single_pixel_fixture()
    ref = reference_of(g, cam, 2, bg)
    assert np.count_nonzero(ref.radii) >= 24, seed
    for rng_mode in ("last_contributor", "full_range"):
        for reduce in ("simd", "tg", "original"):
            a, grads = grads_bytes(dict(raster_backward=reduce, raster_backward_range=rng_mode,
                                        raster_backward_sparse="warp_any"), g, cam, bg, d_image)
            b, _ = grads_bytes(dict(raster_backward=reduce, raster_backward_range=rng_mode,
                                    raster_backward_sparse="off"), g, cam, bg, d_image)
            assert a == b, f"warp_any vs off differ ({reduce}, {rng_mode}); seed {seed}"
            c, _ = grads_bytes(dict(raster_backward=reduce, raster_backward_range=rng_mode,
                                    raster_backward_atomic="spread_lanes"), g, cam, bg, d_image)
            assert a == c, f"lane_zero vs spread_lanes differ ({reduce}, {rng_mode}); seed {seed}"
            assert np.count_nonzero(grads.opacity_logits) >= 24, f"too few contributors; seed {seed}"
    first, _ = grads_bytes({}, g, cam, bg, d_image)
    for variant in VARIANTS:
        got, _ = grads_bytes(variant, g, cam, bg, d_image)
        assert got == first, f"{variant_id(variant)} differs on the single-pixel fixture; seed {seed}"


def test_deterministic_is_bitwise_reproducible():
    rng, seed = make_rng()
    g, cam = to_splat(scene_for(rng, 5000, 160, 120, 3))
    bg = rng.uniform(0, 1, 3).astype(np.float32)
    d_image = rng.normal(size=(120, 160, 3)).astype(np.float32)
    runs = []
    for _ in range(3):
        r = metal(deterministic=True)
        out = r.forward(g, cam, 3, bg)
        grads = r.backward(d_image)
        runs.append([out.image.tobytes()] + [getattr(grads, n).tobytes() for n in GRADS])
    assert runs[0] == runs[1] == runs[2], seed


@pytest.mark.parametrize("n,key_bits", [(1, 8), (33, 12), (4096, 40), (4097, 44), (100_003, 44), (250_000, 64),
                                        (70_000, 32)])
def test_radix_sort_matches_a_stable_argsort(n, key_bits):
    rng, seed = make_rng()
    high = rng.integers(0, 1 << max(0, key_bits - 32), size=n, dtype=np.uint64) if key_bits > 32 else 0
    low_bits = min(key_bits, 32)
    low = rng.integers(0, 50, size=n, dtype=np.uint64) * np.uint64(((1 << low_bits) - 1) // 50)
    keys = ((np.uint64(high) << np.uint64(32)) | low) if key_bits > 32 else low
    keys = keys.astype(np.uint64)
    values = rng.permutation(n).astype(np.uint32)
    try:
        got_k, got_v = _core.gpu_radix_sort(keys, values, key_bits, backend="metal")
    except (ValueError, RuntimeError) as e:
        if "only backend='cuda'" in str(e) or "no CUDA backend" in str(e):
            pytest.skip(f"the radix-sort test hook does not reach the Metal backend in this build: {e}")
        raise
    order = np.argsort(keys, kind="stable")
    assert np.array_equal(got_k, keys[order]), seed
    assert np.array_equal(got_v, values[order]), seed


def test_warm_calls_allocate_nothing():
    rng, _ = make_rng()
    g, cam = to_splat(scene_for(rng, 2000, 100, 80, 3))
    bg = np.zeros(3, np.float32)
    r = metal()
    d_image = rng.normal(size=(80, 100, 3)).astype(np.float32)
    for _ in range(2):
        r.forward(g, cam, 3, bg)
        r.backward(d_image)
    before = r._native.allocation_count
    for _ in range(3):
        r.forward(g, cam, 3, bg)
        r.backward(d_image)
    assert r._native.allocation_count == before


def test_per_kernel_timing_records_every_label():
    rng, _ = make_rng()
    g, cam = to_splat(scene_for(rng, 2000, 100, 80, 3))
    _core.gpu_timings(reset=True)
    r = metal(timing="per_kernel")
    r.forward(g, cam, 3, np.zeros(3, np.float32))
    r.backward(np.ones((80, 100, 3), np.float32))
    t = _core.gpu_timings()
    if not t:
        pytest.skip("this build's gpu_timings() does not report the Metal backend")
    for label in ("ts_fwd_project", "ts_fwd_emit_pairs", "ts_fwd_radix_sort", "ts_fwd_rasterize",
                  "ts_backward_raster", "ts_project_back"):
        assert label in t and t[label][0] >= 0.0, label


@pytest.mark.parametrize("fields", [dict(submission="per_kernel"), dict(forward_submission="per_stage"),
                                    dict(binning="per_iter_alloc"), dict(timing="per_kernel"),
                                    dict(pipelining="on")])
def test_submission_and_binning_switches_give_the_same_image(fields):
    rng, seed = make_rng()
    g, cam = to_splat(scene_for(rng, 3000, 120, 90, 2))
    bg = rng.uniform(0, 1, 3).astype(np.float32)
    a = metal().forward(g, cam, 2, bg)
    b = metal(**fields).forward(g, cam, 2, bg)
    assert np.array_equal(a.image, b.image) and np.array_equal(a.radii, b.radii), seed


def test_pipelining_is_reported_as_a_fallback():
    warnings = splat.BackendConfig(backend="metal", pipelining="on").validate("metal")
    assert any(w.startswith("pipelining=on") for w in warnings), warnings


def test_empty_and_invisible_scenes_render_the_background():
    bg = np.array([0.2, 0.4, 0.6], np.float32)
    g = splat.Gaussians(np.zeros((0, 3)), np.zeros((0, 3)), np.zeros((0, 4)), np.zeros(0), np.zeros((0, 1, 3)))
    cam = splat.Camera(np.eye(4), 30.0, 30.0, 20.0, 15.0, 41, 29)
    r = metal()
    out = r.forward(g, cam, 0, bg)
    assert np.array_equal(out.image, np.broadcast_to(bg, (29, 41, 3)))
    assert np.all(out.alpha == 0.0)
    grads = r.backward(np.ones((29, 41, 3), np.float32))
    assert grads.means.shape == (0, 3)
    g = splat.Gaussians(np.array([[0.0, 0.0, -2.0]]), np.zeros((1, 3)), np.array([[1.0, 0, 0, 0]]),
                        np.zeros(1), np.zeros((1, 1, 3)))
    out = r.forward(g, cam, 0, bg)
    assert np.array_equal(out.image, np.broadcast_to(bg, (29, 41, 3))) and out.radii[0] == 0
    grads = r.backward(np.ones((29, 41, 3), np.float32))
    assert not np.any(grads.means) and not np.any(grads.sh)


def test_concurrent_rasterizers_share_the_pipeline_cache():
    """Threads building and running pipelines at once get the single-thread bytes."""
    rng, seed = make_rng()
    g, cam = to_splat(scene_for(rng, 3000, 96, 80, 3))
    bg = rng.uniform(0, 1, 3).astype(np.float32)
    d_image = rng.normal(size=(80, 96, 3)).astype(np.float32)
    variants = [dict(deterministic=True), dict(deterministic=True, raster_backward_range="full_range")] * 3

    def run(variant):
        r = metal(**variant)
        out = r.forward(g, cam, 3, bg)
        grads = r.backward(d_image)
        return [out.image.tobytes()] + [getattr(grads, n).tobytes() for n in GRADS]

    want = [run(v) for v in variants[:2]]
    results, errors = [None] * len(variants), []

    def worker(i):
        try:
            results[i] = run(variants[i])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(variants))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i, got in enumerate(results):
        assert got == want[i % 2], f"thread {i} differs; seed {seed}"


_CHILD = textwrap.dedent("""
    import sys, numpy as np, splat
    sys.path.insert(0, {tests!r})
    from _scenes import make_rng, random_scene
    rng, _ = make_rng({seed})
    s = random_scene(rng, n=3000, sh_degree=3, width=111, height=77, spread=1.6, depth=(2.0, 6.0),
                     pixel_sigma=(0.5, 6.0))
    f = lambda a: np.ascontiguousarray(a, dtype=np.float32)
    g = splat.Gaussians(f(s.means), f(s.log_scales), f(s.quats), f(s.opacity_logits), f(s.sh))
    cam = splat.Camera(f(s.world_to_camera), s.fx, s.fy, s.cx, s.cy, s.width, s.height)
    r = splat.Rasterizer(splat.BackendConfig(backend="metal", deterministic=True, profile={profile}))
    out = r.forward(g, cam, 3, np.ones(3, np.float32))
    grads = r.backward(np.full((77, 111, 3), 0.25, np.float32))
    np.savez({path!r}, image=out.image, means=grads.means, sh=grads.sh, quats=grads.quats)
    print(r._native.description)
""")


def run_child(tmp_path, name, env_extra, profile=False, seed=None):
    seed = seed if seed is not None else make_rng()[1]
    path = str(tmp_path / f"{name}.npz")
    code = _CHILD.format(tests=os.path.dirname(os.path.abspath(__file__)), seed=seed, profile=profile, path=path)
    env = dict(os.environ, **env_extra)
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return np.load(path), p.stdout, p.stderr, seed


def test_run_time_compiled_kernels_match_the_metallib(tmp_path):
    """The embedded source compiled at run time and the install-time metallib
    are the same kernels: identical bytes (deterministic backward)."""
    seed = make_rng()[1]
    a, desc_a, _, _ = run_child(tmp_path, "default", {}, seed=seed)
    b, desc_b, _, _ = run_child(tmp_path, "source", {"SPLAT_METALLIB": "none"}, seed=seed)
    assert "compiled at run time" in desc_b, desc_b
    if "compiled at run time" in desc_a:
        pytest.skip(f"no splat.metallib in this install (built without Xcode's metal tool): {desc_a.strip()}")
    for k in ("image", "means", "sh", "quats"):
        assert a[k].tobytes() == b[k].tobytes(), f"{k}: metallib and run-time source differ; seed {seed}"


def test_profile_logs_pipeline_reflection(tmp_path):
    _, _, err, _ = run_child(tmp_path, "profile", {}, profile=True)
    assert "threadExecutionWidth 32" in err, err
    assert "maxTotalThreadsPerThreadgroup" in err and "staticThreadgroupMemoryLength" in err, err
    assert "splat_rasterize_backward [" in err, err


@pytest.mark.slow
def test_one_million_gaussians_at_1080p():
    rng, seed = make_rng()
    scene = random_scene(rng, n=1_000_000, sh_degree=3, width=1920, height=1080, spread=1.2, depth=(2.0, 10.0),
                         pixel_sigma=(0.5, 4.0), logits=(-3.0, 2.0))
    g, cam = to_splat(scene)
    r = metal()
    out = r.forward(g, cam, 3, np.ones(3, np.float32))
    assert out.image.shape == (1080, 1920, 3) and np.all(np.isfinite(out.image)), seed
    assert np.count_nonzero(out.radii) > 500_000, seed
    grads = r.backward(rng.normal(size=out.image.shape).astype(np.float32))
    for name in GRADS:
        assert np.all(np.isfinite(getattr(grads, name))), (name, seed)
    before = r._native.allocation_count
    again = r.forward(g, cam, 3, np.ones(3, np.float32))
    assert r._native.allocation_count == before and np.array_equal(again.image, out.image), seed
