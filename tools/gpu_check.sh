#!/usr/bin/env bash
# The GPU check in one command, for a machine with an NVIDIA GPU, a driver,
# nvcc-free (NVRTC from the [cuda] wheels or a toolkit) and the build tools:
#
#   tools/gpu_check.sh --stage [DATA]  (where the benchmark data is) copies what
#        the check needs into data/gpu_check/: lego_400's train views and its
#        even test views (frames 0::2), about 26 MiB
#   tools/gpu_check.sh                 (on the GPU machine, from the repository
#        root) builds and installs the package, runs every cuda-marked test with
#        per-test durations, the lego_400 gate at 7000 steps on the staged data,
#        and prints a summary table last
#
# $GPU_CHECK_COMPARE (FIELD=VALUE, space-separated for several) runs the gate
# again with each BackendConfig switch and prints the time ratios (bench/gate.py
# --compare), e.g. GPU_CHECK_COMPARE=kernel_overlap=off.
# Logs go to $GPU_CHECK_OUT (default: gpu_check_out/): cuda_tests.log,
# cuda_tests.xml (JUnit, with each test's duration), gate.log, summary.txt.
# Wheels under .whl/ (gsplat's for the parity tests; viser, lpips, plyfile and
# what they need for the tests that use them) are installed into a scratch
# folder first; gsplat compiles its kernels at first import, which
# runs in the background while the suite runs, and its parity tests run last.
# Exit status: that of the test run (0 when every cuda test passed), else the gate's.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
STAGED=data/gpu_check

if [ "${1:-}" = "--stage" ]; then
  src=${2:-../shared/data}
  [ -d "$src/lego_400" ] || { echo "gpu_check: no lego_400 under $src"; exit 2; }
  rm -rf "$STAGED" && mkdir -p "$STAGED/lego_400/train" "$STAGED/lego_400/test"
  cp "$src"/lego_400/transforms_train.json "$src"/lego_400/transforms_test.json "$STAGED/lego_400/"
  cp "$src"/lego_400/train/*.png "$STAGED/lego_400/train/"
  "$PY" - "$src/lego_400" "$STAGED/lego_400" <<'EOF'
import json, shutil, sys
from pathlib import Path
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
for fr in json.loads((src / "transforms_test.json").read_text())["frames"][0::2]:
    name = fr["file_path"] + ("" if fr["file_path"].endswith(".png") else ".png")
    shutil.copy(src / name, dst / name)
EOF
  du -sh "$STAGED"
  exit 0
fi

OUT=${GPU_CHECK_OUT:-gpu_check_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
start=$(date +%s)

if ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/gpu_check_site .whl/*.whl \
    && export PYTHONPATH=/tmp/gpu_check_site${PYTHONPATH:+:$PYTHONPATH}
fi
gsplat_build=""
if "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('gsplat') is None)" 2>/dev/null; then
  # gsplat compiles its CUDA code on first import: on spare cores, beside the suite.
  (MAX_JOBS=${GSPLAT_JOBS:-8} TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} \
     "$PY" -c "import gsplat.cuda._backend as b; assert b._C is not None" >"$OUT/gsplat_build.log" 2>&1; \
     echo "rc=$?" >>"$OUT/gsplat_build.log") &
  gsplat_build=$!
fi

echo "gpu_check: build and install"
t0=$(date +%s)
if ! "$PY" -m pip install -q --no-build-isolation --no-deps . >"$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"
  echo "gpu_check: the build failed"
  exit 1
fi
build_s=$(( $(date +%s) - t0 ))

# The splat.torch training-loop test trains on the staged lego_400.
[ -d "$STAGED/lego_400" ] && export SPLAT_LEGO400="$PWD/$STAGED/lego_400"
echo "gpu_check: cuda tests"
t0=$(date +%s)
deselect=()
[ -n "$gsplat_build" ] && deselect=(-k "not gsplat")
"$PY" -m pytest -m cuda -p no:cacheprovider -q -s -rfEs --durations=30 --junitxml="$OUT/cuda_tests.xml" \
  "${deselect[@]}" tests 2>&1 | tee "$OUT/cuda_tests.log"
tests_rc=${PIPESTATUS[0]}
tests_s=$(( $(date +%s) - t0 ))

gsplat_rc=""
if [ -n "$gsplat_build" ]; then
  echo "gpu_check: waiting for gsplat's build"
  wait "$gsplat_build"
  tail -3 "$OUT/gsplat_build.log"
  "$PY" -m pytest -m cuda -p no:cacheprovider -q -s -rfEs --junitxml="$OUT/gsplat_tests.xml" -k gsplat tests \
    2>&1 | tee "$OUT/gsplat_tests.log"
  gsplat_rc=${PIPESTATUS[0]}
fi

echo "gpu_check: lego_400 gate, 7000 steps"
t0=$(date +%s)
gate_rc=0
if [ -d "$STAGED/lego_400" ]; then
  compare=()
  for item in ${GPU_CHECK_COMPARE:-}; do compare+=(--compare "$item"); done
  "$PY" bench/gate.py --data "$STAGED" --scenes lego_400 --steps 7000 --test-frames 0::2 ${compare[@]+"${compare[@]}"} 2>&1 \
    | tee "$OUT/gate.log"
  gate_rc=${PIPESTATUS[0]}
else
  echo "gpu_check: no staged data ($STAGED): run tools/gpu_check.sh --stage first; gate skipped" | tee "$OUT/gate.log"
fi
gate_s=$(( $(date +%s) - t0 ))

"$PY" - "$OUT" "$build_s" "$tests_s" "$gate_s" "$(( $(date +%s) - start ))" <<'EOF' | tee "$OUT/summary.txt"
import re, sys
import xml.etree.ElementTree as ET
from pathlib import Path
out, build_s, tests_s, gate_s, total_s = Path(sys.argv[1]), *map(int, sys.argv[2:])
rows, cases = [], []
for name in ("cuda_tests.xml", "gsplat_tests.xml"):
    if not (out / name).exists():
        continue
    for case in ET.parse(out / name).getroot().iter("testcase"):
        state = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                state = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
        cases.append((float(case.get("time", 0)), f"{case.get('classname')}::{case.get('name')}", state))
count = {s: sum(1 for c in cases if c[2] == s) for s in ("passed", "failed", "error", "skipped")}
print("\n=== GPU check summary ===")
print(f"build {build_s} s | cuda tests {tests_s} s | gate {gate_s} s | total {total_s} s")
print(f"cuda tests: {count['passed']} passed, {count['failed']} failed, {count['error']} errors, "
      f"{count['skipped']} skipped")
for t, name, state in sorted(cases, reverse=True)[:12]:
    print(f"  {t:8.1f} s  {state:7}  {name}")
for t, name, state in cases:
    if state in ("failed", "error"):
        print(f"  FAILED: {name}")
gate = (out / "gate.log").read_text() if (out / "gate.log").exists() else ""
lines = [ln for ln in gate.splitlines() if re.search(r"lego_400|PSNR|dB", ln)]
print("gate (lego_400, 7000 steps, test frames 0::2):")
for ln in lines[-6:]:
    print("  " + ln)
EOF
[ "$tests_rc" -ne 0 ] && exit "$tests_rc"
[ -n "$gsplat_rc" ] && [ "$gsplat_rc" -ne 0 ] && exit "$gsplat_rc"
exit "$gate_rc"
