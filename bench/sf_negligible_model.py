"""Sample Factory 2.1.1's side of the pipeline-overhead rows (``bench.throughput``): its VizDoom
training with the negligible-compute encoder of ``bench/negligible_model.py`` (the same network,
written against Sample Factory's encoder API). Runs in Sample Factory's venv, imports nothing of sfx:

    bench/sf_venv/bin/python -m bench.sf_negligible_model --env=doom_basic ... (train_vizdoom's flags)
"""

from __future__ import annotations

import sys

import torch
from torch import nn

from bench.grid_pool import GRID, grid_means

WIDTH = 16  # bench/negligible_model.py's width: the two overhead trainings run the same network


def make_pooled_encoder(cfg, obs_space):
    from sample_factory.model.encoder import Encoder

    class PooledEncoder(Encoder):
        def __init__(self) -> None:
            super().__init__(cfg)
            channels = obs_space["obs"].shape[0]
            self.fc = nn.Linear(channels * GRID * GRID, WIDTH)

        def forward(self, obs_dict):
            return torch.nn.functional.elu(self.fc(grid_means(obs_dict["obs"])))

        def get_out_size(self) -> int:
            return WIDTH

    return PooledEncoder()


def main() -> int:
    from sample_factory.algo.utils.context import global_model_factory
    from sample_factory.train import run_rl
    from sf_examples.vizdoom.train_vizdoom import parse_vizdoom_cfg, register_vizdoom_envs

    register_vizdoom_envs()
    global_model_factory().register_encoder_factory(make_pooled_encoder)
    return run_rl(parse_vizdoom_cfg())


if __name__ == "__main__":
    sys.exit(main())
