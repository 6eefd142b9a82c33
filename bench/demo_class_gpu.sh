#!/usr/bin/env bash
# The whole demo class graded on a GPU, in parts that each fit one device call (10 minutes), each part's OUT packed
# into one file DEST/PART.tgz (grades.csv, results/, schedule.json, the reference verdicts, the log) for bench/side_by_side.py,
# bench/references.py --from and bench/grading_throughput.py --project --from, run anywhere afterwards:
#   solutions  fast_correct and unchanged_stub, Weeks 1 and 2, and fast_correct_twin: a second copy of
#              fast_correct's Week 2 Day 7 (it autotunes), whose ratios must match the first's in the same busy class;
#              also tabulates the references (DEST/solutions-bench.json, the copy bandwidth measured here)
#   others     every other demo student of Weeks 1 and 2
#   week3      every demo student of Week 3
# Run from the repository root after `source bench/gpu_env.sh`:  bash bench/demo_class_gpu.sh PART DEST
set -euo pipefail
if [[ $1 == twin ]]; then  # the CLASS_HOOK of the solutions part: $2 is the class folder
    mkdir -p "$2/fast_correct_twin/week2"
    cp "$2/fast_correct/week2/day7_optimized_gemm.ipynb" "$2/fast_correct_twin/week2/"
    exit 0
fi
part=$1
dest=$2
work=build/demo-class-gpu/$part
hook=
names=/tmp/demo-class-names
rm -rf "$names" && python3 -m grader demo "$names" >/dev/null
case $part in
    solutions) students="fast_correct unchanged_stub"; notebooks='^week[12]/'; hook="bash bench/demo_class_gpu.sh twin" ;;
    others) students=$(cd "$names" && ls -d */week[12] | cut -d/ -f1 | sort -u | grep -vxE 'fast_correct|unchanged_stub' \
        | tr '\n' ' '); notebooks='^week[12]/' ;;
    week3) students=$(cd "$names" && ls -d */week3 | cut -d/ -f1 | tr '\n' ' '); notebooks='^week3/' ;;
    *) echo "PART is solutions, others or week3, not $part" >&2; exit 2 ;;
esac
mkdir -p "$dest" "$work"
OUT=$work STUDENTS=$students NOTEBOOKS=$notebooks JOBS=${JOBS:-4} CLASS_HOOK=$hook bash bench/gpu_course_check.sh \
    | tee "$work/summary.txt"
if [[ $part == solutions ]]; then
    python3 -m bench references --from "$work/grades" --json "$dest/solutions-bench.json" > "$work/bench.txt"
fi
tar -czf "$dest/$part.tgz" -C "$work" summary.txt grade.log grades/grades.csv grades/schedule.json grades/results \
    $(cd "$work" && ls grades/reference/*/*/verdict.json)
