"""Hypothesis settings shared by the property tests (import after
pytest.importorskip("hypothesis"))."""
from hypothesis import HealthCheck, settings


def quick(n: int):
    """n examples, no deadline, no example database, fixtures of the test function allowed."""
    return settings(max_examples=n, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
