set -u
export PATH=/opt/venv-wh/bin:/opt/bwrap/usr/bin:$PATH PYTHONUNBUFFERED=1
unset PYTHONPATH
for run in 1 2; do
rm -rf build/w1d2 build/w1d2-out && python3 -m grader demo build/w1d2 >/dev/null
for s in build/w1d2/*; do case $(basename $s) in fast_correct) ;; *) rm -rf $s;; esac; done
find build/w1d2 -name '*.ipynb' ! -name 'day2_gpu_arrays.ipynb' -delete
timeout 150 python3 -m grader grade build/w1d2 --out build/w1d2-out --device gpu --allow-ungraded --schedule serial > $OUT/w1d2-$run.log 2>&1
echo "rc=$?"; grep "day2_gpu_arrays " $OUT/w1d2-$run.log | tail -2
cp build/w1d2-out/runs/fast_correct/week1/day2_gpu_arrays/verdict.json $OUT/verdict-$run.json 2>/dev/null
done
