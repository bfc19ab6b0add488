#!/usr/bin/env bash
# Call 3: the cover record for emission, A/B; 4K cells; suite; absgrad tolerance over seeds.
set -u
export PYTHONUNBUFFERED=1
O=$OUT; T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
ap() { git apply "$@" .gpu/cover.patch 2>/dev/null || patch -s -p1 "$@" < .gpu/cover.patch; }
ap -R || { echo "revert failed"; exit 1; }
python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/base . > $O/build_base.log 2>&1 || { tail -20 $O/build_base.log; exit 1; }
ap || { echo "apply failed"; exit 1; }
python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/new . > $O/build_new.log 2>&1 || { tail -20 $O/build_new.log; exit 1; }
python3 -m pip install -q --no-build-isolation --no-deps . > $O/build.log 2>&1
el built
for round in 1 2; do
  for v in base new; do
    PYTHONPATH=/tmp/$v timeout 100 python3 bench/scale.py --gaussians 1000000,6000000 --sizes 800x800 --steps 40 --warmup 10 > $O/scale_${v}_$round.log 2>&1
    echo "== $v round $round"; grep -E "^ *[0-9]" $O/scale_${v}_$round.log | head -4
  done
done
el "scale done"
PYTHONPATH=/tmp/new timeout 90 python3 bench/scale.py --gaussians 1000000,6000000 --sizes 3840x2160 --steps 40 --warmup 10 > $O/scale_4k.log 2>&1
grep -E "^ *[0-9]" $O/scale_4k.log | head -4
PYTHONPATH=/tmp/new timeout 110 python3 bench/gate.py --data data/gpu_check --scenes lego_400 --test-frames 0::2 > $O/gate_new.log 2>&1
grep -E "step 30000|>= 35.5|ts_fwd|ts_backward|ts_adam" $O/gate_new.log | tail -8
el "gate done"
export SPLAT_LEGO400=$PWD/data/gpu_check/lego_400
LEFT=$(( 580 - ($(date +%s) - T0) ))
(timeout $LEFT python3 -m pytest -q -m cuda -p no:cacheprovider -rfE tests > $O/suite.log 2>&1; echo "suite rc=$?" >> $O/suite.log) &
(timeout $LEFT python3 .gpu/absgrad_diag2.py > $O/absgrad.log 2>&1) &
wait
el "all done"
tail -4 $O/suite.log; cat $O/absgrad.log | tail -20
