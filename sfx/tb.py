"""``python -m sfx.tb [serve|plot|table] PATTERN... [--dir train_dir] ...``: monitoring of experiments.

A thin entry point: everything is in :mod:`sfx_tb.cli`, which imports neither torch nor the trainer.
"""

import sys

from sfx_tb.cli import main

if __name__ == "__main__":
    sys.exit(main())
