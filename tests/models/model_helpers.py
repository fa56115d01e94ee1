"""Helpers shared by the model tests (a plain module: conftest.py names would clash across rooms)."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from gymnasium import spaces


@functools.lru_cache(maxsize=None)
def _parsed_defaults() -> tuple:
    from sfx.registries import default_cfg

    return tuple(vars(default_cfg()).items())


def make_cfg(**overrides) -> SimpleNamespace:
    """A small model cfg (fast on CPU): every flag of a parsed cfg, the small model below, then
    ``overrides`` (flag names only). Not validated, so tests can hand the models bad values.
    float32 on the CPU (``mixed_precision="off"``, ``device="cpu"``) whatever the machine."""
    base = dict(_parsed_defaults())
    base.update(encoder_type="conv", encoder_subtype="convnet_simple", hidden_size=16, use_rnn=True,
                rnn_type="gru", rnn_num_layers=1, normalize_input=True, normalize_returns=False,
                obs_scale=255.0, nonlinearity="elu", mixed_precision="off", device="cpu")
    unknown = sorted(set(overrides) - set(base))
    if unknown:
        raise TypeError(f"make_cfg got unknown fields {unknown}; they are not flags")
    base.update(overrides)
    return SimpleNamespace(**base)


def vector_space(dim: int = 5) -> spaces.Box:
    return spaces.Box(-np.inf, np.inf, shape=(dim,), dtype=np.float32)


def image_space(shape=(72, 128, 3)) -> spaces.Box:
    return spaces.Box(0, 255, shape=shape, dtype=np.uint8)


def random_obs(space: spaces.Box, *batch: int, gen: torch.Generator | None = None) -> torch.Tensor:
    """Observations as the buffers hold them: uint8 for images, float32 vectors."""
    if np.issubdtype(space.dtype, np.integer):
        return torch.randint(0, 256, (*batch, *space.shape), dtype=torch.uint8, generator=gen)
    return torch.randn((*batch, *space.shape), generator=gen) * 3.0 + 1.0


@pytest.fixture(autouse=True)
def seeded():
    """Import into a test module to seed torch before each of its tests."""
    torch.manual_seed(0)
