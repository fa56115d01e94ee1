"""Torch's thread count for the entry points that only act (sfx.enjoy, sfx.evaluate, sfx.export), set as a
training sets it for the processes that act (its policy workers and evaluator run on one thread)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

# a batch of a few agents is too small to share out, and torch's default (one thread per core) spins at
# every op's barrier: beside a busy CPU, 5 CartPole episodes took 36 s with the default and 3.5 s with one
ACTING_THREADS = 1


@contextlib.contextmanager
def acting_threads(threads: int = ACTING_THREADS) -> Iterator[None]:
    """Cap torch's intra-op threads to ``threads`` while the block runs, then give the caller back its own
    setting (``sfx.evaluate`` runs in the caller's process, e.g. a notebook that trains in it too)."""
    import torch  # cfg itself loads no torch: only the entry points that act come here

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
