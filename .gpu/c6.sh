#!/usr/bin/env bash
# Call 6: batch_views on the GPU: its tests, and the gate's quality at 2 and 4 views a step.
set -u
export PYTHONUNBUFFERED=1
O=$OUT; T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
python3 -m pip install -q --no-build-isolation --no-deps . > $O/build.log 2>&1 || { tail -20 $O/build.log; exit 1; }
el built
timeout 75 python3 bench/gate.py --data data/gpu_check --scenes lego_400 --test-frames 0::2 --set train.batch_views=4 > $O/gate_b4.log 2>&1
grep -E "step (7000|15000|30000)|wall_ms|not met|met" $O/gate_b4.log | tail -6
el "gate b4"
(timeout 75 python3 bench/gate.py --data data/gpu_check --scenes lego_400 --test-frames 0::2 --set train.batch_views=2 > $O/gate_b2.log 2>&1) &
(timeout 70 python3 -m pytest -q -m cuda -p no:cacheprovider -rfE tests/test_cuda_batch_views.py tests/test_cuda_pair_sizing.py > $O/tests.log 2>&1) &
wait
tail -3 $O/tests.log
grep -E "step (7000|15000|30000)" $O/gate_b2.log | tail -3
el done
