#!/usr/bin/env bash
# Week 2, Day 1: profile the Horner kernel with Nsight Compute and print the metrics the notebook reads.
#
#   bash bench/ncu_day1.sh          (from anywhere, on the GPU machine; PY=... and NCU=... override the tools)
#
# Four settings of one kernel (course/days/profiling_target.py): 0 Horner steps is a copy (no arithmetic), S steps
# do S fused multiply-adds (2S FLOPs) per 8 bytes of DRAM traffic. For each, ncu profiles the second
# launch (the first one compiles) and `python -m course.days.profiling summary` prints the metrics with the
# rates derived from them and the device's datasheet ridge point. By default ncu locks the GPU's clocks
# to their base frequency while it profiles, so its durations are longer than course.bench's.
# Last, a full report of 64 steps is saved for the Nsight Compute GUI and its Speed Of Light section printed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
NCU=${NCU:-ncu}
OUT=${OUT:-build/ncu_day1}
mkdir -p "$OUT"
"$NCU" --version | tail -n 1
DEVICE_NAME=$("$PY" -c 'import torch; print(torch.cuda.get_device_name())')
METRICS=$("$PY" -m course.days.profiling metrics)
for steps in 0 8 64 256; do
  echo "== Horner kernel, $steps steps"
  "$NCU" --csv --print-units base --metrics "$METRICS" --kernel-name regex:horner_kernel \
    --launch-skip 1 --launch-count 1 \
    "$PY" -m course.days.profiling target --steps "$steps" > "$OUT/steps$steps.csv"
  "$PY" -m course.days.profiling summary "$OUT/steps$steps.csv" --peaks "$DEVICE_NAME"
done
echo "== full report of 64 steps: $OUT/horner_full.ncu-rep (open it with ncu-ui)"
"$NCU" --set full --kernel-name regex:horner_kernel --launch-skip 1 --launch-count 1 -f -o "$OUT/horner_full" \
  "$PY" -m course.days.profiling target --steps 64 > "$OUT/horner_full.log" 2>&1
"$NCU" --import "$OUT/horner_full.ncu-rep" --page details --section SpeedOfLight
