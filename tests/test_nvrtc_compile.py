"""Every SIMT kernel x every valid specialization compiles through NVRTC.

Needs only libnvrtc, not a GPU: CI gets it from the nvidia-cuda-nvrtc-cu12
wheel (the `test` extra). Skips only when NVRTC cannot be found at all.
"""
import itertools

import pytest

from splat import _core

KERNELS = {
    "splat_project_forward", "splat_project_forward_views", "splat_project_backward", "splat_project_backward_views",
    "splat_expand_sh_grad",
    "splat_scan_block_sums",
    "splat_scan_rows", "splat_gather_pair_counts",
    "splat_scan_apply", "splat_radix_histogram", "splat_radix_scatter", "splat_emit_pairs", "splat_pair_total",
    "splat_tile_ranges", "splat_tile_chunks", "splat_rasterize_chunks", "splat_rasterize_forward",
    "splat_rasterize_walk", "splat_rasterize_checkpoints", "splat_rasterize_backward",
    "splat_ssim_forward", "splat_ssim_backward", "splat_ssim_forward_views", "splat_ssim_backward_views",
    "splat_adam", "splat_grad_accumulate", "splat_grad_stats",
    "splat_reset_opacity", "splat_cap_scales",
    "splat_densify_classify", "splat_densify_mark", "splat_densify_sources", "splat_densify_gather",
    "splat_densify_children",
    "splat_count_nonfinite", "splat_nonfinite_total",
    "splat_mcmc_weights", "splat_mcmc_block_offsets", "splat_mcmc_sample", "splat_mcmc_apply", "splat_mcmc_copy",
    "splat_mcmc_regularize", "splat_mcmc_noise",
    "splat_absgrad_pair_sum", "splat_exposure_apply", "splat_exposure_backward", "splat_exposure_reduce",
    "splat_exposure_adam", "splat_exposure_center",
}


def require_nvrtc():
    ok, info = _core.nvrtc_available()
    if not ok:
        pytest.skip(f"libnvrtc cannot be found: {info}")
    return info


def failures_of(rows):
    return [f"{k} [{s}]:\n{log}" for k, s, ok, log in rows if not ok]


def spec_of(label):
    return dict(item.split("=") for item in label.split(",")) if label else {}


def test_every_kernel_and_specialization_compiles_to_ptx():
    require_nvrtc()
    rows = _core.nvrtc_compile_all("compute_90")
    assert not failures_of(rows), "\n".join(failures_of(rows))
    assert {r[0] for r in rows} == KERNELS

    # raster_backward: every BackendConfig combination maps to a compiled
    # specialization (simd and tg: 2x2x2, original: range x sparse,
    # deterministic: range), each with and without absgrad.
    specs = [spec_of(s) for k, s, _, _ in rows if k == "splat_rasterize_backward"]
    assert len(specs) == 44 and len({tuple(sorted(s.items())) for s in specs}) == 44
    got = {tuple(int(s[f"SPLAT_SPEC_{n}"]) for n in ("BWD_REDUCE", "BWD_RANGE", "BWD_SPARSE", "BWD_ATOMIC",
                                                  "DETERMINISTIC", "ABSGRAD")) for s in specs}
    for absgrad in range(2):
        for reduce, rng, sparse, atomic in itertools.product(range(3), range(2), range(2), range(2)):
            assert (reduce, rng, sparse, 0 if reduce == 2 else atomic, 0, absgrad) in got
        for rng in range(2):
            assert (0, rng, 0, 0, 1, absgrad) in got
    det = {s["SPLAT_SPEC_DETERMINISTIC"] for k, s in
           ((k, spec_of(s)) for k, s, _, _ in rows if k == "splat_project_backward")}
    assert det == {"0", "1"}


def test_every_kernel_compiles_to_an_h200_cubin():
    require_nvrtc()
    rows = _core.nvrtc_compile_all("sm_90")
    assert not failures_of(rows), "\n".join(failures_of(rows))


def test_a_bad_architecture_reports_the_nvrtc_log():
    require_nvrtc()
    rows = _core.nvrtc_compile_all("compute_1")
    assert rows and not any(ok for _, _, ok, _ in rows)
    assert all("nvrtc" in log.lower() or "architecture" in log.lower() for _, _, _, log in rows)


def test_the_gathering_defines_compile(monkeypatch):
    # SPLAT_WALK_COMPACT=0 and SPLAT_BWD_COMPACT=0 (shaders/kernels: each pixel
    # on its own thread, against the default's gathered pixels) through the
    # developer hook, as an A/B on a GPU sets them.
    require_nvrtc()
    monkeypatch.setenv("SPLAT_NVRTC_OPTIONS", "-DSPLAT_WALK_COMPACT=0 -DSPLAT_BWD_COMPACT=0")
    rows = [r for r in _core.nvrtc_compile_all("sm_90")
            if r[0] in ("splat_rasterize_walk", "splat_rasterize_backward")]
    assert len(rows) == 45 and not failures_of(rows), "\n".join(failures_of(rows))


def test_the_exact_adam_define_compiles(monkeypatch):
    # SPLAT_ADAM_EXACT=1 (compat.h): the IEEE square root and division in Adam's
    # step instead of the hardware approximations, the A/B a GPU run sets through
    # the developer hook. Every kernel that steps Adam compiles with it.
    require_nvrtc()
    monkeypatch.setenv("SPLAT_NVRTC_OPTIONS", "-DSPLAT_ADAM_EXACT=1")
    names = ("splat_adam", "splat_exposure_adam")
    rows = [r for r in _core.nvrtc_compile_all("sm_90") if r[0] in names]
    assert {r[0] for r in rows} == set(names) and not failures_of(rows), "\n".join(failures_of(rows))


def test_the_direct_sort_define_compiles(monkeypatch):
    # SPLAT_SORT_STAGED=0 (radix_sort.h; staged by default): the scatter storing each
    # key at its slot directly, the A/B a GPU run sets through the developer hook.
    require_nvrtc()
    monkeypatch.setenv("SPLAT_NVRTC_OPTIONS", "-DSPLAT_SORT_STAGED=0")
    rows = [r for r in _core.nvrtc_compile_all("sm_90") if r[0] == "splat_radix_scatter"]
    assert len(rows) == 1 and not failures_of(rows), "\n".join(failures_of(rows))


def test_the_chunk_pass_define_compiles(monkeypatch):
    # rasterize_forward.h's A/B switch of the chunk pass, set through the
    # developer hook as a GPU run sets it: SPLAT_CHUNK_SKIP_ENDED=0 (the head
    # launches blend every pixel, ended or not; 1 by default).
    require_nvrtc()
    monkeypatch.setenv("SPLAT_NVRTC_OPTIONS", "-DSPLAT_CHUNK_SKIP_ENDED=0")
    rows = [r for r in _core.nvrtc_compile_all("sm_90") if r[0] == "splat_rasterize_chunks"]
    assert rows and not failures_of(rows), "\n".join(failures_of(rows))
