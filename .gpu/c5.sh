#!/usr/bin/env bash
set -u
T0=$(date +%s)
python3 -c "import splat" 2>/dev/null || python3 -m pip install -q --no-build-isolation --no-deps . > $OUT/build.log 2>&1
timeout 200 python3 .gpu/absgrad_diag3.py 2>&1 | tail -12
echo "done $(( $(date +%s) - T0 )) s"
