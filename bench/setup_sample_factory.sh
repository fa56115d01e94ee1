#!/usr/bin/env bash
# Create bench/sf_venv: Sample Factory 2.1.1 with its doom examples, for the side-by-side figures of
# bench/throughput.py. Its own venv because it pins numpy<2 and gymnasium<1.0, which sfx does not.
#
#   bash bench/setup_sample_factory.sh            # or SF_VENV=/elsewhere PYTHON=python3.11 ...
#
# Torch: the CPU build that sfx's venv uses (SF 2.1.1 accepts any torch >=1.9,<3.0 but 1.13.0).
# On a machine whose default index serves only CUDA builds, set SF_TORCH_INDEX to a CPU wheel index.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${SF_VENV:-$here/sf_venv}"
python="${PYTHON:-python3}"
torch_req="${SF_TORCH:-torch==2.13.0}"

if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c "import sample_factory, sf_examples.vizdoom, vizdoom, torch" 2>/dev/null; then
    echo "$venv already has Sample Factory $("$venv/bin/python" -c 'from importlib.metadata import version; print(version("sample-factory"))')"
    exit 0
fi

"$python" -m venv "$venv"
pip=("$venv/bin/pip" install --no-input)
if [[ -n "${SF_TORCH_INDEX:-}" ]]; then
    "${pip[@]}" --index-url "$SF_TORCH_INDEX" "$torch_req"
else
    "${pip[@]}" "$torch_req"
fi
# numpy<2: SF 2.1.1 pins it; vizdoom<2.0: the range SF's [vizdoom] extra asks for
"${pip[@]}" "sample-factory[vizdoom]==2.1.1" "$torch_req" "numpy<2" "vizdoom<2.0"
"$venv/bin/python" - <<'PY'
from importlib.metadata import version
import numpy, torch, gymnasium, vizdoom, sample_factory, sf_examples.vizdoom.train_vizdoom
print(f"Sample Factory {version('sample-factory')}, torch {torch.__version__}, numpy {numpy.__version__}, "
      f"gymnasium {gymnasium.__version__}, vizdoom {vizdoom.__version__}")
PY
