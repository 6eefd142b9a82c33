#!/usr/bin/env bash
# On a GPU machine with no network: what the sandbox lets a notebook see, and what starting it costs. Installs the
# grader's wheels (.whl/, with pytest's three) and bubblewrap (.deb/) through bench/gpu_env.sh, then times a
# sandbox's start at this tree and, where .base/ holds an older grader's course/ and grader/ (git archive), at that
# one; then runs tests/test_secrets.py on the GPU. Writes under ${OUT:-build/gpu-secrets}.
set -euo pipefail
source bench/gpu_env.sh
OUT=${OUT:-build/gpu-secrets}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -m grader.wall.sandbox
python3 bench/sandbox_startup.py --repeats 9 --json "$OUT/startup.json"
if [ -d .base/grader ]; then
    PYTHONPATH=/opt/site:$PWD/.base python3 -P bench/sandbox_startup.py --repeats 9 --label "${BASE_LABEL:-.base}" \
        --json "$OUT/startup_before.json"
fi
python3 -m pytest tests/test_secrets.py -p no:randomly -p no:cacheprovider -q -rA 2>&1 | tee "$OUT/secrets.log"
