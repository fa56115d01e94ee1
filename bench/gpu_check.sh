#!/usr/bin/env bash
# bench.throughput on a GPU node without a package index (issue 35's setting), from the repository root.
#
#   bash scripts/gpu_wheelhouse.sh --python 3.12 --minimal     # once, where an index is reached: 58 MB in
#                                                              # bench/results/wheelhouse (carry it to the node)
#   bash bench/gpu_check.sh --only sfx --only sf --sfx_row ungated="--batches_ahead=0"   # on the node
#
# Installs the wheelhouse (sfx's dependencies into /tmp/site, Sample Factory's into /tmp/site_sf, unless
# there already), prints the GPU, then runs python -m bench.throughput --device=gpu with 16 workers x 16
# envs, batch 4096, 30 s windows after 15 s of warm-up, and the arguments given (they come last, so they
# win). Results and logs go to $OUT (the device tool's output folder) or bench/results/gpu. Each training
# row takes about a minute with start-up: choose rows with --only to fit a time limit.
set -euo pipefail
cd "$(dirname "$0")/.."
wheels="${WHEELHOUSE:-bench/results/wheelhouse}"
out="${OUT:-bench/results/gpu}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "gpu_check: no nvidia-smi"
echo "$(nproc) cores; python3 $(python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__,
                                                  "CUDA", torch.cuda.is_available())' 2>&1 | tail -1)"
if ! PYTHONPATH=/tmp/site python3 -c "import gymnasium, faster_fifo, vizdoom" 2>/dev/null; then
    [[ -x "$wheels/install.sh" ]] || { echo "gpu_check: no $wheels/install.sh (scripts/gpu_wheelhouse.sh makes it)" >&2; exit 3; }
    bash "$wheels/install.sh" >"$out/install.log" 2>&1 || { tail -20 "$out/install.log"; exit 4; }
fi
sf_python=(); [[ -x /tmp/sfpy ]] && sf_python=(--sf_python=/tmp/sfpy)
PYTHONPATH=/tmp/site python3 -m bench.throughput --device=gpu --num_workers=16 --num_envs_per_worker=16 \
    --batch_size=4096 --seconds=30 --warmup=15 --out_dir="$out" --keep_logs ${sf_python[@]+"${sf_python[@]}"} "$@"
