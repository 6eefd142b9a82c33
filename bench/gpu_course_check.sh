#!/usr/bin/env bash
# Every course notebook through the grader on a GPU: the demo students named in STUDENTS (default:
# the solution's answers and the notebook as shipped) for the notebooks matching NOTEBOOKS (a grep
# pattern over "<week>/<notebook>", default all). Prints one line per graded notebook and, for each
# timed exercise, the reference solution's and the student's speed against the library, measured by
# the judge in the same run. CLASS_HOOK, if set, is a command run with the class folder as its last argument before
# grading (bench/w2d4_stage_students.py adds students there). Run from the repository root with the grader's wheels installed
# (bench/fetch_gpu_wheels.sh) and bubblewrap on PATH. Writes under ${OUT:-build/gpu-course}.
set -euo pipefail
OUT=${OUT:-build/gpu-course}
STUDENTS=${STUDENTS:-"fast_correct unchanged_stub"}
NOTEBOOKS=${NOTEBOOKS:-.}
JOBS=${JOBS:-2}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
class=/tmp/gpu-course-class
grades="$OUT/grades"
rm -rf "$class" "$grades"
python3 -m grader demo "$class" >/dev/null
for student in "$class"/*; do
    case " $STUDENTS " in *" $(basename "$student") "*) ;; *) rm -rf "$student"; continue ;; esac
    for notebook in "$student"/*/*.ipynb; do
        key="$(basename "$(dirname "$notebook")")/$(basename "$notebook" .ipynb)"
        echo "$key" | grep -q -E "$NOTEBOOKS" || rm -f "$notebook"
    done
done
if [[ -n ${CLASS_HOOK:-} ]]; then $CLASS_HOOK "$class"; fi
/usr/bin/time -f "grading: %e s wall" python3 -m grader grade "$class" --out "$grades" --device gpu --jobs "$JOBS" \
    --allow-ungraded > "$OUT/grade.log" 2>&1 || { tail -40 "$OUT/grade.log"; exit 1; }
tail -3 "$OUT/grade.log"
python3 - "$grades" <<'EOF'
import sys
from pathlib import Path

from course.spec import geometric_mean, get
from grader.score.stored import load_results

for r in sorted(load_results(Path(sys.argv[1])), key=lambda r: (r.assignment, r.notebook, r.student)):
    if r.status == "missing":
        continue
    earned = sum(i.score or 0 for i in r.items)
    maximum = sum(i.max_score for i in r.items)
    lost = [f"{i.item}={i.score}" for i in r.items if i.score != i.max_score]
    times = " ".join(f"{k}={v:.0f}" for k, v in sorted(r.timings.items()))
    print(f"{r.assignment}/{r.notebook:<28} {r.student:<15} {r.status:<8} {earned:g}/{maximum:g} {times} "
          f"lost: {' '.join(lost) or '-'}")
    by_spec = {}
    for row in r.perf_rows:
        by_spec.setdefault(row["spec"], []).append(row)
    for spec_id, rows in by_spec.items():
        spec = get(spec_id)
        cells = []
        for row in rows:
            shape = "x".join(str(n) for n in row["shape"])
            ref, lib, me = row["reference_rate"], row["baseline_rate"], row["student_rate"]
            cells.append(f"{shape}: you {me:.0f} ref {ref:.0f} {spec.library_name} {lib:.0f} {spec.rate_unit}"
                         + (f" ({row['error'][:80]})" if row.get("error") else ""))
        ratio = geometric_mean([row["reference_rate"] / row["baseline_rate"] for row in rows if row["baseline_rate"]])
        print(f"    {spec_id}: reference/{spec.library_name} geomean {ratio:.3f}; " + "; ".join(cells))
EOF
