"""Device memory goes with its object (docs/architecture.md, "Device memory").

A process that makes and drops Rasterizers, Trainers and splat.torch pools of
changing sizes, as a notebook or a sweep script does, ends within a few MiB of
the driver memory it had after the first of each: what stays is the CUDA
context, held from the first object to exit. Driver memory is read with
cuMemGetInfo (splat._core.cuda_device_memory); no collection is forced, so an
object must free its buffers when its last reference goes.
Run on a GPU: `pytest -m cuda tests/test_cuda_memory.py`.
"""
import numpy as np
import pytest

import splat
from splat import _core
from _scenes import make_rng
from test_training import make_dataset, random_gaussians, small_config

pytestmark = pytest.mark.cuda

_ok, _why = splat.backend_available("cuda")
if not _ok:
    pytest.skip(f"CUDA backend not available: {_why}", allow_module_level=True)

MIB = 1 << 20
# What a dropped object may leave in the driver's books: allocation granularity
# and the driver's own bookkeeping. Measured on the H200: 0.00 MiB after 50
# Rasterizers and Trainers of up to 1 GiB each; a few MiB is the margin.
LEFT_BEHIND = 8 * MIB
# The driver's used memory in a second pass of splat.torch calls whose pools no
# longer grow: measured on the H200 within 8 MiB of the first pass's peak, and once
# 16.0 MiB above it with the pools exactly as large (the driver's books, not ours).
STEADY_DRIVER_MARGIN = 32 * MIB


def used():
    free, total = _core.cuda_device_memory()
    return total - free


def arena_bytes():
    return _core.gpu_memory()["arena_bytes"]


def cuda():
    return splat.BackendConfig(backend="cuda")


def rasterizer_round(rng, n, size):
    """A Rasterizer's forward and backward of n Gaussians; the driver memory while it lives."""
    r = splat.Rasterizer(cuda())
    g = random_gaussians(rng, n, spread=0.8, scale=(0.01, 0.05))
    cam = make_dataset(rng, random_gaussians(rng, 4), n_views=1, width=size, height=size).cameras[0]
    out = r.forward(g, cam, sh_degree=1)
    r.backward(rng.normal(0, 1, out.image.shape).astype(np.float32))
    return used()


def trainer_round(rng, n, size):
    """Two steps of a Trainer from n Gaussians; the driver memory while it lives."""
    ds = make_dataset(rng, random_gaussians(rng, 40), n_views=2, width=size, height=size)
    g = random_gaussians(rng, n)
    start = dict(means=g.means, log_scales=g.log_scales, quats=g.quats, opacity_logits=g.opacity_logits, sh=g.sh)
    tr = splat.Trainer(ds, small_config(densify_from=1, densify_every=1), cuda(), start)
    tr.step()
    tr.step()
    return used()


def test_fifty_dropped_rasterizers_and_trainers_give_their_memory_back():
    rng, seed = make_rng()
    rasterizer_round(rng, 1000, 64)
    trainer_round(rng, 1000, 64)
    base, base_arena = used(), arena_bytes()
    sizes = [(int(rng.integers(1_000, 400_000)), int(rng.choice([64, 256, 512, 1024]))) for _ in range(50)]
    above = []
    for i, (n, size) in enumerate(sizes):
        above.append((rasterizer_round if i % 2 else trainer_round)(rng, n, size) - base)
    left = used() - base
    print(f"seed {seed}: largest object {max(above) / MIB:.1f} MiB above the start, "
          f"{left / MIB:.2f} MiB left after 50")
    assert arena_bytes() == base_arena, seed
    assert max(above) > 64 * MIB, (above, seed)  # the objects did hold memory
    assert left <= LEFT_BEHIND, (left / MIB, seed)


def test_splat_torch_stays_bounded_as_n_changes_and_empty_cache_gives_it_back():
    """A loop of splat.torch calls whose N changes reaches a steady state: the
    second pass over the same inputs takes no device memory the first did not
    (the pools' buffers grow only past their largest call), and empty_cache()
    gives it all back."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    import splat.torch as st
    rng, seed = make_rng()
    w, h = 640, 480
    view = torch.eye(4, device="cuda")[None]
    view[0, 2, 3] = 3.0
    K = torch.tensor([[[500.0, 0, w / 2], [0, 500.0, h / 2], [0, 0, 1]]], device="cuda")

    def call(n):
        gen = torch.Generator(device="cuda").manual_seed(seed % 2 ** 62 + n)  # the same inputs for the same n
        r = lambda *shape: torch.rand(*shape, device="cuda", generator=gen)  # noqa: E731
        means, quats = (r(n, 3) - 0.5) * 2, r(n, 4) - 0.5
        scales, opacities, colors = r(n, 3) * 0.02 + 0.002, r(n) * 0.9 + 0.05, r(n, 3)
        for t in (means, scales, opacities, colors):
            t.requires_grad_(True)
        out, alpha, _ = st.rasterization(means, quats, scales, opacities, colors, view, K, w, h, packed=False)
        (out.sum() + alpha.sum()).backward()
        del out, alpha, means, quats, scales, opacities, colors
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # torch's own cache is not ours to count
        return used(), arena_bytes()

    sizes = [int(x) for x in rng.integers(1_000, 300_000, 30)]
    # A first pass loads the kernels torch uses at these sizes (lazily, for good:
    # measured 94 MiB of the driver's memory) and sets up torch's context.
    for n in sizes:
        call(n)
    st.empty_cache()
    base, base_arena = used(), arena_bytes()
    first = [call(n) for n in sizes]
    second = [call(n) for n in sizes]
    top = max(u for u, _ in first)
    print(f"seed {seed}: pools at most {(max(a for _, a in first) - base_arena) / MIB:.1f} MiB, the driver "
          f"{(top - base) / MIB:.1f} MiB above the start; second pass at most "
          f"{(max(u for u, _ in second) - base) / MIB:.1f} MiB")
    assert max(a for _, a in second) == first[-1][1], seed  # no buffer grew in the second pass
    assert max(u for u, _ in second) <= top + STEADY_DRIVER_MARGIN, seed
    st.empty_cache()
    assert arena_bytes() == base_arena, seed
    left = used() - base
    assert left <= LEFT_BEHIND, (left / MIB, seed)
