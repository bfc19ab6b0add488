#!/usr/bin/env bash
# Call 1: verify HEAD (suite, Adam approx PSNR) and the batch-quality question.
set -u
export PYTHONUNBUFFERED=1
O=$OUT; T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
el build
python3 -m pip install -q --no-build-isolation --no-deps . > $O/build.log 2>&1 || { tail -30 $O/build.log; exit 1; }
el built
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
# Phase A: the gate alone (time matters)
timeout 120 python3 bench/gate.py --data data/gpu_check --scenes lego_400 --test-frames 0::2 > $O/gate_approx.log 2>&1
grep -E "step 30000|lego_400 .*s" $O/gate_approx.log | tail -3
el "gate done"
# Phase B: concurrently (PSNR only)
LEFT=$(( 575 - ($(date +%s) - T0) ))
export SPLAT_LEGO400=$PWD/data/gpu_check/lego_400
(timeout $LEFT python3 -m pytest -q -m cuda -p no:cacheprovider -rfE tests > $O/suite.log 2>&1; echo "suite rc=$?" >> $O/suite.log) &
(timeout $LEFT python3 .gpu/batch_quality.py data/gpu_check/lego_400 4 30000 0 > $O/batch4.log 2>&1) &
(SPLAT_TEST_SEED=6054692766954603278 timeout 200 python3 -m pytest -q -m cuda -p no:cacheprovider -s "tests/test_cuda_absgrad_exposure.py::test_absgrad_statistic_matches_cpu[default]" > $O/flaky.log 2>&1) &
(timeout 300 python3 bench/real.py --scenes thermos --steps 7000,30000 --root data/captures > $O/thermos_approx.log 2>&1) &
(SPLAT_NVRTC_OPTIONS=-DSPLAT_ADAM_EXACT=1 timeout 300 python3 bench/real.py --scenes thermos --steps 7000,30000 --root data/captures > $O/thermos_exact.log 2>&1) &
(SPLAT_NVRTC_OPTIONS=-DSPLAT_ADAM_EXACT=1 timeout 200 python3 bench/gate.py --data data/gpu_check --scenes lego_400 --test-frames 0::2 > $O/gate_exact.log 2>&1) &
wait
el "all done"
tail -5 $O/suite.log; tail -3 $O/flaky.log; cat $O/batch4.log | tail -5
grep -E "step 30000" $O/gate_exact.log | tail -2
grep -E "PSNR" $O/thermos_approx.log | tail -2; grep -E "PSNR" $O/thermos_exact.log | tail -2
