"""Where the model runs: the one decision from ``--device`` (cpu or cuda).

It lives here, below the engine, because both sides need it: the engine places learners and
policy workers with it (``sfx.engine.wiring.resolve_device`` adds the once-per-run warning), and
the image encoders pick their precision for the device they will run on
(:mod:`sfx.models.precision`); models must not import the engine.
"""

from __future__ import annotations

from typing import Any

import torch


def select_device(cfg: Any) -> torch.device:
    """``cuda`` for ``--device=gpu`` where CUDA is available, else ``cpu``."""
    return torch.device("cuda" if cfg.device == "gpu" and torch.cuda.is_available() else "cpu")
