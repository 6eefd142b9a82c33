#!/usr/bin/env bash
# The judge on a GPU machine: timing agreement with the notebook harness, and the same submissions
# graded three times (a fresh secret seed each time). Run from the repository root, with the grader's
# wheels installed (bench/fetch_gpu_wheels.sh) and bubblewrap on PATH. Writes under ${OUT:-build/gpu-judge}.
set -euo pipefail
OUT=${OUT:-build/gpu-judge}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

echo "== judge vs notebook harness (reference kernel, Week 1 Day 7 bench shapes)"
python3 bench/judge_agreement.py "$OUT/agreement.json"

echo "== fast_correct and slow_correct graded three times"
class=/tmp/gpu-judge-class
grades=/tmp/gpu-judge-grades
rm -rf "$class" "$grades"
python3 -m grader demo "$class" >/dev/null
for student in "$class"/*; do
    case $(basename "$student") in fast_correct|slow_correct) ;; *) rm -rf "$student" ;; esac
done
for round in 1 2 3; do
    rm -rf "$grades/results"
    /usr/bin/time -f "round $round: %e s wall" python3 -m grader grade "$class" --out "$grades" --device gpu \
        > "$OUT/grade-$round.log" 2>&1 || { tail -30 "$OUT/grade-$round.log"; exit 1; }
    python3 - "$grades" "$round" >> "$OUT/rounds.txt" <<'EOF'
import sys
from pathlib import Path
from grader.pipeline import load_results
for r in load_results(Path(sys.argv[1])):
    items = " ".join(f"{i.item.removeprefix('perf_w1d7_matmul_fp32_')}={i.score:g}" for i in r.items)
    times = " ".join(f"{k}={v:.1f}" for k, v in sorted(r.timings.items()))
    print(f"round {sys.argv[2]} {r.student} seed={r.run_seed} total={r.score:g} | {items} | {times}")
EOF
done
cat "$OUT/rounds.txt"
