"""A model of negligible compute for image observations, for the pipeline-overhead rows of
``bench.throughput``: what a training costs beyond its env and its model, on a real image env.

The encoder averages each channel over a 2 x 2 grid of the image (12 numbers for RGB) and maps them
through one fully connected layer of ``WIDTH`` units: a few thousand flops per observation, against
~10 Mflop for the conv encoder both frameworks put on an image by default. Sample Factory gets the
same network from ``bench/sf_negligible_model.py`` (its own venv, its own encoder API), so the two
overhead trainings differ only in their pipelines.

sfx: registered at import as the custom encoder ``ENCODER_NAME``; the training runs as
``python -m bench.negligible_model <sfx.train flags> --encoder_type=bench_pooled``, so that sfx's
worker processes, which import the main module again, register it too.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bench.grid_pool import GRID, grid_means

ENCODER_NAME = "bench_pooled"
WIDTH = 16


class PooledEncoder(nn.Module):
    """[N, C, H, W] float images -> [N, WIDTH]: per-channel means over a GRID x GRID grid, then Linear + ELU."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.fc = nn.Linear(channels * GRID * GRID, WIDTH)
        self.out_size = WIDTH

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.elu(self.fc(grid_means(obs)))


def make_pooled_encoder(cfg: Any, obs_space: Any) -> PooledEncoder:
    shape = obs_space.shape
    if len(shape) != 3:
        raise ValueError(f"{ENCODER_NAME} encodes [C, H, W] images; the observation shape is {shape}")
    return PooledEncoder(int(shape[0]))


def _register() -> None:
    from sfx.models import register_encoder

    register_encoder(ENCODER_NAME, make_pooled_encoder)


_register()

if __name__ == "__main__":
    # as the main module, sfx's worker processes import this one again, and its encoder with it
    import sys

    from sfx.train import main

    sys.exit(main())
