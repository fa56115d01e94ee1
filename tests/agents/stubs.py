"""Stand-ins shared by the agents' tests."""

import torch

from sfx.agents import Batch


class ListedFresh:
    """Stands in for the engine's FreshTrajectories: hands the given batches (trajectory dicts) in order, every
    active step valid, acted by the current weights."""

    def __init__(self, batches):
        self.batches = list(batches)

    def ready(self):
        return bool(self.batches)

    def add(self, slots):
        pass

    def next_batch(self, version):
        data = self.batches.pop(0)
        n, T = data["rewards"].shape
        return Batch(data=data, valids=data["active"].clone(), fresh=torch.ones(n, dtype=torch.bool),
                     age=torch.zeros(n, T), env_steps=n * T, ids=torch.full((n,), -1))
