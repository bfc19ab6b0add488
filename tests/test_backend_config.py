"""BackendConfig: every field and value, dict round trip, validation."""
import itertools
import random

import pytest

import splat

EXPECTED = {
    "backend": ["auto", "metal", "cuda", "cpu"],
    "raster_backward": ["simd", "tg", "original"],
    "raster_backward_range": ["last_contributor", "full_range"],
    "raster_backward_sparse": ["warp_any", "off"],
    "raster_backward_atomic": ["spread_lanes", "lane_zero"],
    "radix_sort": ["portable", "native"],
    "submission": ["chained", "per_kernel"],
    "forward_submission": ["chained", "per_stage"],
    "pipelining": ["off", "on"],
    "binning": ["resident", "per_iter_alloc"],
    "pair_sizing": ["device", "readback"],
    "raster_forward_chunks": ["auto", "all", "skip_saturated"],
    "kernel_overlap": ["auto", "off", "programmatic"],
    "view_launches": ["together", "per_view"],
    "deterministic": ["false", "true"],
    "timing": ["off", "per_kernel"],
    "profile": ["false", "true"],
}
BOOL_FIELDS = {"deterministic", "profile"}


def as_python(field, value):
    return value == "true" if field in BOOL_FIELDS else value


def test_fields_and_defaults():
    assert splat.BackendConfig.fields() == EXPECTED
    d = splat.BackendConfig().to_dict()
    assert d == {k: as_python(k, v[0]) for k, v in EXPECTED.items()}


@pytest.mark.parametrize("field", sorted(EXPECTED))
def test_every_value_round_trips(field):
    for value in EXPECTED[field]:
        c = splat.BackendConfig(**{field: as_python(field, value)})
        assert getattr(c, field) == as_python(field, value)
        again = splat.BackendConfig(c.to_dict())
        assert again == c
        assert splat.BackendConfig.from_dict(c.to_dict()) == c


def test_random_configs_round_trip_and_equality():
    rng = random.Random()
    for _ in range(50):
        d = {k: as_python(k, rng.choice(v)) for k, v in EXPECTED.items()}
        c = splat.BackendConfig(**d)
        assert c.to_dict() == d
        assert splat.BackendConfig(d) == c
        other = dict(d)
        field = rng.choice(sorted(EXPECTED))
        other[field] = as_python(field, next(v for v in EXPECTED[field] if as_python(field, v) != d[field]))
        assert splat.BackendConfig(other) != c
        for k, v in d.items():
            assert f"{k}={str(v).lower() if isinstance(v, bool) else v}" in repr(c)


def test_setters():
    c = splat.BackendConfig()
    c.raster_backward = "tg"
    c.deterministic = True
    assert c.raster_backward == "tg" and c.deterministic is True
    with pytest.raises(ValueError, match="raster_backward"):
        c.raster_backward = "fast"


@pytest.mark.parametrize("field", sorted(EXPECTED))
def test_invalid_value_names_field_and_lists_values(field):
    with pytest.raises(ValueError) as err:
        splat.BackendConfig(**{field: "no_such_value"})
    msg = str(err.value)
    assert field in msg and "no_such_value" in msg
    for v in EXPECTED[field]:
        assert v in msg


def test_invalid_types_and_fields():
    with pytest.raises(ValueError, match="unknown field 'rasterbackward'.*raster_backward"):
        splat.BackendConfig(rasterbackward="simd")
    with pytest.raises(ValueError, match="unknown field 'foo'"):
        splat.BackendConfig({"foo": "bar"})
    for value in (4, True, 0.5, ["x"]):   # an unknown field is that error, not one about its value's type
        with pytest.raises(ValueError, match="unknown field 'threads'; accepted fields: backend"):
            splat.BackendConfig(threads=value)
    with pytest.raises(ValueError, match="raster_backward: expected a string"):
        splat.BackendConfig(raster_backward=3)
    with pytest.raises(ValueError, match="raster_backward: expected a string, got a bool"):
        splat.BackendConfig(raster_backward=True)
    with pytest.raises(ValueError, match="deterministic"):
        splat.BackendConfig(deterministic="maybe")
    # bool fields also take their string names
    assert splat.BackendConfig(deterministic="true").deterministic is True


def test_validate_cpu_warns_for_each_ignored_switch():
    assert splat.BackendConfig().validate("cpu") == []
    non_default = {k: v[1] for k, v in EXPECTED.items()
                   if k not in ("backend", "deterministic", "timing", "profile", "pair_sizing", "view_launches")}
    non_default["kernel_overlap"] = "programmatic"   # "off" is what the cpu does anyway
    for field, value in non_default.items():
        warnings = splat.BackendConfig(**{field: value}).validate("cpu")
        assert len(warnings) == 1, (field, warnings)
        assert warnings[0].startswith(f"{field}={value}:") and "falls back to" in warnings[0]
    # deterministic is always honoured on the cpu; it counts every forward's
    # pairs on the host, which is what pair_sizing=readback asks
    assert splat.BackendConfig(deterministic=True).validate("cpu") == []
    assert splat.BackendConfig(pair_sizing="readback").validate("cpu") == []
    assert splat.BackendConfig(kernel_overlap="off").validate("cpu") == []
    # the cpu trains a batch's views one after another, which is what per_view asks
    assert splat.BackendConfig(view_launches="per_view").validate("cpu") == []


def test_validate_gpu_backends():
    for backend in ("cuda", "metal"):
        assert splat.BackendConfig().validate(backend) == []
        w = splat.BackendConfig(radix_sort="native").validate(backend)
        assert len(w) == 1 and "falls back to portable" in w[0]
        w = splat.BackendConfig(deterministic=True, raster_backward="tg").validate(backend)
        assert len(w) == 1 and "deterministic" in w[0]
        # overlapped launches: CUDA decides by device; Metal has none, and "off" is what it does
        assert splat.BackendConfig(kernel_overlap="off").validate(backend) == []
        w = splat.BackendConfig(kernel_overlap="programmatic").validate(backend)
        assert (w == []) if backend == "cuda" else (len(w) == 1 and "falls back to off" in w[0])
    with pytest.raises(ValueError, match="backend"):
        splat.BackendConfig().validate("vulkan")


def test_all_combinations_construct():
    names = sorted(EXPECTED)
    sample = list(itertools.product(*(EXPECTED[k] for k in names)))
    random.shuffle(sample)
    for combo in sample[:200]:
        d = {k: as_python(k, v) for k, v in zip(names, combo)}
        assert splat.BackendConfig(**d).to_dict() == d


def test_backend_discovery():
    ok, reason = splat.backend_available("cpu")
    assert ok and reason == ""
    assert splat.resolve_backend("cpu") == "cpu"
    assert splat.resolve_backend("auto") in ("cpu", "cuda", "metal")
    ok, reason = splat.backend_available("metal")
    if not ok:
        assert "Metal" in reason
