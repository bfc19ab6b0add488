#!/usr/bin/env bash
set -u
export PYTHONUNBUFFERED=1
T0=$(date +%s)
python3 -m pip install -q --no-build-isolation --no-deps . > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "built $(( $(date +%s) - T0 )) s"
for s in 6054692766954603278 5241; do
  SPLAT_TEST_SEED=$s timeout 60 python3 -m pytest -q -m cuda -p no:cacheprovider tests/test_cuda_absgrad_exposure.py -k absgrad_statistic 2>&1 | tail -1
done
timeout $(( 235 - ($(date +%s) - T0) )) python3 .gpu/absgrad_diag2.py 2>&1 | tail -8
echo "done $(( $(date +%s) - T0 )) s"
