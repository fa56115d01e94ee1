"""``python -m sfx.tune_throughput``."""

import sys

from sfx.tune_throughput.cli import main

sys.exit(main())
