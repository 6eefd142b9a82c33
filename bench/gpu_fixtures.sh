#!/usr/bin/env bash
# Grade chosen adversarial fixtures on a GPU in one batch and compare each with tests/adversarial/expected.py.
#   FIXTURES="honest_fast kernel_spins_forever ..." JOBS=4 bash bench/gpu_fixtures.sh
# DEMO="fast_correct:week2/bonus_sgemm_ladder ..." adds demo-class notebooks to the batch (student:notebook), each
# graded as student "demo-<student>"; every result's points are listed after the fixtures' check.
# Run from the repository root on the GPU machine after `source bench/gpu_env.sh`. Writes under ${OUT:-build/gpu-fixtures}.
set -euo pipefail
OUT=${OUT:-build/gpu-fixtures}
JOBS=${JOBS:-4}
SEED=${SEED:-20261122}
mkdir -p "$OUT"
class=/opt/gpu-fixtures-class
grades=/opt/gpu-fixtures-grades
rm -rf "$class" "$grades"
# shellcheck disable=SC2086
python3 tests/adversarial/build.py "$class" $FIXTURES > /dev/null
if [[ -n ${DEMO:-} ]]; then
    python3 -m grader demo /opt/gpu-fixtures-demo > /dev/null
    for pick in $DEMO; do
        student=${pick%%:*} notebook=${pick#*:}
        mkdir -p "$class/demo-$student/$(dirname "$notebook")"
        cp "/opt/gpu-fixtures-demo/$student/$notebook.ipynb" "$class/demo-$student/$notebook.ipynb"
    done
fi
start=$(date +%s)
python3 -m grader grade "$class" --out "$grades" --device gpu --jobs "$JOBS" --cell-timeout 60 --notebook-timeout 240 \
    --judge-timeout 300 --memory-gb 4 --seed "$SEED" --allow-ungraded > "$OUT/grade.log" 2>&1 || true
echo "grading: $(( $(date +%s) - start )) s wall for $(echo $FIXTURES | wc -w) fixtures, jobs $JOBS, seed $SEED"
tail -15 "$OUT/grade.log"
python3 tests/adversarial/check_results.py "$grades" gpu | grep -v "NOT GRADED" | tee "$OUT/check.txt" || true
python3 - "$grades" <<'PY' | tee "$OUT/points.txt"
import sys
from pathlib import Path

from grader.pipeline import load_results

for r in sorted(load_results(Path(sys.argv[1])), key=lambda r: (r.student, r.assignment, r.notebook)):
    if r.status != "missing":
        lost = " | ".join(f"{i.item}={i.score} ({i.message[:160]})" for i in r.items if i.score != i.max_score)
        print(f"{r.student:<40} {r.assignment}/{r.notebook:<26} {r.status:<13} {r.score:g}/{r.max_score:g} "
              f"lost: {lost or '-'}")
PY
tar -C "$grades" -czf "$OUT/results.tgz" results 2>/dev/null || true
