"""The PBT tests drive sfx.engine.run_training directly: import sfx.pbt here, as ``python -m sfx.train``
does, so that population-based training is registered as a coordinator observer."""

import sfx.pbt  # noqa: F401
