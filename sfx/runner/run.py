"""``python -m sfx.runner.run --run=<module> --runner=processes|slurm|ngc [--dry_run] [--status] ...``

A thin entry point: everything is in :mod:`sfx_runner.cli`, which imports neither torch nor the
trainer, so this command works on a login node without them.
"""

import sys

from sfx_runner.cli import main

if __name__ == "__main__":
    sys.exit(main())
