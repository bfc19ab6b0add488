"""The Metal backend (the shared SIMT kernels through Metal, function
constants, splat.metallib or the embedded source) against the numpy
reference, the CPU backend, and itself across every BackendConfig variant.

The checks, tolerances and fixtures are the GPU parity suite in _gpu_suite.py,
shared with test_cuda.py and collected here under the `metal` mark; this module
adds the Metal-only paths (the run-time compiled library against the metallib,
the pipeline cache under concurrent use, profile reflection).
"""
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import splat

pytestmark = pytest.mark.metal

_ok, _why = splat.backend_available("metal")
if not _ok:
    pytest.skip(f"Metal backend not available: {_why}", allow_module_level=True)

from _gpu_suite import *  # noqa: E402,F401,F403 - the shared tests, collected here
from _gpu_suite import GRADS, SUBMISSION_SWITCHES, rasterizer, scene_for, to_splat  # noqa: E402
from _scenes import make_rng  # noqa: E402


@pytest.fixture
def backend():
    return "metal"


# Metal also renders the same image with per-kernel timing and with pipelining on (a fallback).
@pytest.fixture(params=SUBMISSION_SWITCHES + [dict(timing="per_kernel"), dict(pipelining="on")])
def fields(request):
    return request.param


def metal(**fields):
    return rasterizer("metal", **fields)


def test_description_names_the_device_and_the_kernel_library():
    r = metal()
    assert r.backend == "metal"
    d = r._native.description
    assert d.startswith("metal (") and "kernels:" in d, d


def test_auto_picks_metal_on_macos():
    if sys.platform != "darwin":
        pytest.skip("backend='auto' prefers Metal on macOS only")
    assert splat.Rasterizer(splat.BackendConfig(backend="auto")).backend == "metal"


def test_pipelining_is_reported_as_a_fallback():
    warnings = splat.BackendConfig(backend="metal", pipelining="on").validate("metal")
    assert any(w.startswith("pipelining=on") for w in warnings), warnings


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

