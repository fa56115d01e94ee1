#!/usr/bin/env bash
# One call on a lent GPU machine (the device tool), from the repository root: the CUDA-only tests, then
# bench/gpu_check.sh's rows, results where the tool brings files back ($OUT: at most 8 files, 2 folders down).
#
#   bash bench/gpu_session.sh --only sfx --only sf --only sampler_len --episode_len=6 ...   # gpu_check.sh's args
#   TESTS="tests/engine/test_cuda_graphs.py" BENCH_LIMIT=330 bash bench/gpu_session.sh ...
#
# Carry bench/results/wheelhouse (scripts/gpu_wheelhouse.sh --python 3.12 --minimal). BENCH_LIMIT (seconds,
# default 480) ends the bench inside the call's own limit: rows cut short keep their logs (--keep_logs copies
# each row's log when it ends) in $OUT/res.tgz; bench.txt (the rows as printed) and dmon.txt (nvidia-smi dmon,
# SM and memory utilisation once a second) are written into $OUT as they grow.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-bench/results/gpu_session}"
mkdir -p "$OUT"
R=/tmp/gpu_session; mkdir -p $R
(nvidia-smi dmon -s um -d 1 > "$OUT/dmon.txt" 2>&1 &)
t0=$SECONDS
bash bench/results/wheelhouse/install.sh > $R/install.log 2>&1 || tail -20 $R/install.log
echo "install done in $((SECONDS - t0)) s"
export PYTHONPATH=/tmp/site
timeout 90 python3 -m pytest -q -p no:cacheprovider ${TESTS:-tests/engine/test_cuda_graphs.py tests/engine/test_staging.py} 2>&1 | tail -15
echo "tests done at $((SECONDS - t0)) s"
OUT=$R timeout "${BENCH_LIMIT:-480}" bash bench/gpu_check.sh "$@" 2>&1 | tee "$OUT/bench.txt"
echo "bench done at $((SECONDS - t0)) s"
pkill -f "nvidia-smi dmon" || true
cp $R/throughput.json $R/throughput.png "$OUT/" 2>/dev/null
tar czf "$OUT/res.tgz" -C $R . && ls -la "$OUT"
