set -u
export PATH=/opt/venv-wh/bin:/opt/bwrap/usr/bin:$PATH PYTHONUNBUFFERED=1
unset PYTHONPATH
nvidia-smi --query-gpu=index,name --format=csv,noheader; nproc; git log --oneline -1 2>/dev/null
timeout 590 python3 bench/gpu_scaling.py --copies 4 --grader-timeout 370 --work build/scaling --json $OUT/scaling.json > $OUT/scaling.txt 2>&1
echo "scaling rc=$?"
cp build/scaling/*.smi.csv $OUT/ 2>/dev/null
for d in build/scaling/gpus-*; do cp $d/schedule.json $OUT/$(basename $d).schedule.json 2>/dev/null; done
tail -45 $OUT/scaling.txt
