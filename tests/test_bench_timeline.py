"""bench/timeline.py's analysis of a GPU trace: busy time as the union of the
events' intervals, per-kernel sums, and the gaps between them, against a
brute-force count on a microsecond grid; its argument errors without a GPU."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import SOURCE_ROOT  # noqa: E402

sys.path.insert(0, os.path.join(SOURCE_ROOT, "bench"))
import timeline  # noqa: E402


def _events(rng, n):
    names = [f"kernel_{i}" for i in range(5)]
    t, out = 1000, []
    for _ in range(n):
        t += int(rng.integers(-30, 60))  # overlaps (concurrent streams) and gaps
        dur = int(rng.integers(1, 80))
        out.append({"ts": float(t), "dur": float(dur), "name": names[int(rng.integers(0, 5))]})
        t = max(t, t + dur // 2)
    rng.shuffle(out)  # a trace's order is not time order
    return out


def test_busy_time_kernel_sums_and_gaps_match_a_microsecond_grid():
    rng = np.random.default_rng()
    ev = _events(rng, int(rng.integers(50, 200)))
    steps = int(rng.integers(1, 8))
    s = timeline.summarize(ev, steps, gap_us=20.0)

    lo = int(min(e["ts"] for e in ev))
    hi = int(max(e["ts"] + e["dur"] for e in ev))
    grid = np.zeros(hi - lo, bool)
    for e in ev:
        grid[int(e["ts"]) - lo:int(e["ts"] + e["dur"]) - lo] = True
    np.testing.assert_allclose(s["busy_ms_per_step"] * 1e3 * steps, grid.sum(), rtol=1e-12)
    np.testing.assert_allclose(s["span_ms"] * 1e3, hi - lo, rtol=1e-12)

    # idle runs on the grid longer than 20 us are the gaps, in time order
    idle = np.flatnonzero(np.diff(np.concatenate([[1], grid.astype(int), [1]])))
    runs = [b - a for a, b in zip(idle[::2], idle[1::2])]
    assert [g["us"] for g in s["gaps"]] == [r for r in runs if r > 20]

    for name, k in s["kernels"].items():
        mine = [e for e in ev if e["name"] == name]
        assert round(k["launches_per_step"] * steps) == len(mine)
        np.testing.assert_allclose(k["ms_per_step"] * 1e3 * steps, sum(e["dur"] for e in mine))
    shares = [k["ms_per_step"] for k in s["kernels"].values()]
    assert shares == sorted(shares, reverse=True)


def test_only_gpu_events_are_counted():
    trace = {"traceEvents": [{"cat": "kernel", "name": "a", "ts": 0.0, "dur": 5.0},
                             {"cat": "gpu_memcpy", "name": "Memcpy DtoH", "ts": 10.0, "dur": 2.0},
                             {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 0.0, "dur": 3.0},
                             {"cat": "cpu_op", "name": "aten::add", "ts": 1.0, "dur": 9.0},
                             {"ph": "M", "name": "process_name"}]}
    assert [e["name"] for e in timeline.gpu_events(trace)] == ["a", "Memcpy DtoH"]


def test_argument_errors_name_the_argument(tmp_path):
    script = os.path.join(SOURCE_ROOT, "bench", "timeline.py")
    missing = tmp_path / "nowhere"
    proc = subprocess.run([sys.executable, script, str(missing)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "scene" in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, script, str(tmp_path), "--profile", "0"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "--profile" in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, script, str(tmp_path), "--set", "train.steps=0"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "train.steps" in proc.stderr and "Traceback" not in proc.stderr


def test_exported_trace_reads_the_trace_back_and_keeps_only_a_named_file(tmp_path):
    class FakeProfiler:
        written = []

        def export_chrome_trace(self, path):
            self.written.append(path)
            with open(path, "w") as f:
                json.dump({"traceEvents": [{"cat": "kernel", "name": "k", "ts": 1.0, "dur": 2.0}]}, f)

    prof = FakeProfiler()
    assert timeline.exported_trace(prof)["traceEvents"][0]["name"] == "k"
    assert not os.path.exists(prof.written[-1])  # the scratch file is gone
    kept = tmp_path / "trace.json"
    assert timeline.exported_trace(prof, kept)["traceEvents"][0]["dur"] == 2.0
    assert kept.exists()
