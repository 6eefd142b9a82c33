source bench/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 90 python3 -m pytest -q -x -p no:cacheprovider tests/test_schedule.py tests/test_day7_optimized_gemm.py -k "replays_on_the_judge or schedule" > $OUT/tests.txt 2>&1; echo "tests rc=$?"; tail -2 $OUT/tests.txt
nvidia-smi --query-gpu=timestamp,utilization.gpu --format=csv,noheader -lms 250 > $OUT/smi.csv &
timeout 480 python3 bench/grading_throughput.py --copies 2 --students fast_correct,slow_correct,wrong_no_masks,calls_torch --device gpu --json $OUT/tp_w1d7.json --work build/tp > $OUT/tp_w1d7.txt 2>&1; echo "bench rc=$?"
kill %1; head -70 $OUT/tp_w1d7.txt
