"""The CUDA backend (the shared SIMT kernels through NVRTC) against the numpy
reference, the CPU backend, and itself across every BackendConfig variant.

The checks, tolerances and fixtures are the GPU parity suite in _gpu_suite.py,
shared with test_metal.py and collected here under the `cuda` mark.
"""
import pytest

import splat

pytestmark = pytest.mark.cuda

_ok, _why = splat.backend_available("cuda")
if not _ok:
    pytest.skip(f"CUDA backend not available: {_why}", allow_module_level=True)

from _gpu_suite import *  # noqa: E402,F401,F403 - the shared tests, collected here
from _gpu_suite import SUBMISSION_SWITCHES  # noqa: E402


@pytest.fixture
def backend():
    return "cuda"


# Programmatic dependent launch (the default from sm_90 on) changes when kernels start, not
# what they compute: plain launches stay covered.
@pytest.fixture(params=SUBMISSION_SWITCHES + [dict(kernel_overlap="off")])
def fields(request):
    return request.param
