"""n-step bootstrapped return targets, batch-major ``[B, T]``, with episode ends inside the window.

The n-step return (Sutton and Barto 2018, "Reinforcement Learning: An Introduction", 2nd ed., section 7.1,
eq. 7.1; used as the Q-learning target by Ape-X, Horgan et al. 2018, and R2D2, Kapturowski et al. 2019,
section 2.3) of the step ``t`` of a sequence is

    G_t = sum_{k=0}^{h-1} gamma^k r_{t+k}  +  gamma^h V_{t+h-1}

where the window ``k = 0 .. h - 1`` has ``h = min(n, T - t)`` steps (windows near the end of the sequence
shorten: they bootstrap from the last value available) and is cut by the first episode end in it
(Gymnasium: termination does not bootstrap, truncation does):

    step t+k terminated:   stop; no bootstrap                                 (discount 0)
    step t+k truncated:    stop; add gamma^{k+1} trunc_values[t+k]            (the final observation's value)
    k = h - 1, no end:     add gamma^{k+1} next_values[t+k]                   (the next observation's value)

``next_values[t]`` is the value of the observation *after* step ``t`` (the ``x_{t+1}`` that step ``t``
returned; ``next_values[T-1]`` the one after the sequence); at a truncated step that slot holds the
*reset* observation of the next episode, so the value of the final observation comes from
``trunc_values[t]`` instead. A step both terminated and truncated counts as terminated.

Inactive steps (multi-agent: ``active`` False; ``sfx.algo.targets`` explains why) are transparent, as in
V-trace and GAE: the window counts the agent's own (active) steps, an inactive step neither counts nor
discounts, its reward reaches the active step before it with that step's next power of gamma, and its
episode end cuts the window there. In terms of a loop over the raw steps ``j = t, t+1, ...`` with ``k``
the number of active steps already summed (``k`` starts at 0 and grows by one after each active step):

    active j and k = n:  stop; add gamma^k next_values[j-1]                   (window full)
    otherwise:           G += gamma^k r_j;  k += 1 where j is active
    terminated j:        stop                                                 (discount 0)
    truncated j:         stop; add gamma^k trunc_values[j]
    j = T - 1:           stop; add gamma^k next_values[T-1]

So an active step's target is the one of the shorter trajectory of its own steps, each active step's
reward followed by ``gamma`` times the rewards of the inactive steps after it, its next value read at the
step before the agent's next decision (the observation it decides on). With every step active this is the
all-active recursion above, to the bit.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["NStepTargets", "n_step_targets"]


class NStepTargets(NamedTuple):
    """The n-step targets of every step of a batch of sequences, all ``[B, T]``.

    Attributes:
        targets: ``G_t``, the n-step return with its bootstrap (dtype of the values); 0 at inactive steps.
        discounts: the power of gamma multiplying the bootstrap value in ``targets`` (``gamma^h``), 0 where
            the window was cut by a termination (and at inactive steps).
        horizon: int64, the number of the agent's own steps whose rewards were summed (``h``: 1 .. n; the
            rewards of inactive steps ride along with the active step before them); 0 at inactive steps.
    """

    targets: torch.Tensor
    discounts: torch.Tensor
    horizon: torch.Tensor


def check_gamma_n(fn: str, gamma: float, n: int) -> None:
    """Raise one-line ``ValueError`` unless ``0 <= gamma <= 1`` and ``n`` is an integer >= 1."""
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0.0 <= float(gamma) <= 1.0:
        raise ValueError(f"{fn}: gamma={gamma!r}; the discount must be a number in [0, 1]")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{fn}: n={n!r}; the number of steps must be an integer >= 1")


def check_batch_major(fn: str, **tensors: torch.Tensor | None) -> tuple[int, int]:
    """Raise one-line ``ValueError`` unless every given tensor (``None`` skipped) is ``[B, T]`` like the first.
    Returns ``(B, T)``."""
    given = [(name, x) for name, x in tensors.items() if x is not None]
    first_name, first = given[0]
    if not isinstance(first, torch.Tensor) or first.dim() != 2:
        shape = tuple(first.shape) if isinstance(first, torch.Tensor) else type(first).__name__
        raise ValueError(f"{fn}: {first_name} must be a [B, T] tensor, got {shape}")
    for name, x in given[1:]:
        if not isinstance(x, torch.Tensor) or x.shape != first.shape:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"{fn}: {name} has shape {shape}, expected {tuple(first.shape)} like {first_name}")
    return first.shape[0], first.shape[1]


def n_step_targets(rewards: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor,
                   next_values: torch.Tensor, trunc_values: torch.Tensor, gamma: float, n: int,
                   active: torch.Tensor | None = None) -> NStepTargets:
    """n-step bootstrapped returns (module docstring), batch-major.

    Args:
        rewards: ``[B, T]`` rewards ``r_t`` of step ``t``.
        terminated: ``[B, T]`` bool, step ``t`` ended its episode (no bootstrap after it).
        truncated: ``[B, T]`` bool, a time limit cut the episode at step ``t`` (bootstrap from ``trunc_values``).
        next_values: ``[B, T]`` value of the observation after step ``t`` (already in reward scale, e.g.
            the rescaling's inverse applied); read only where a window ends at ``t`` without an episode end.
        trunc_values: ``[B, T]`` value of the final observation of step ``t``; read only where ``t`` was
            truncated (elsewhere it may hold anything, NaN included).
        gamma: discount in [0, 1].
        n: window length in the agent's steps, >= 1 (``n = 1``: the one-step TD target).
        active: ``[B, T]`` bool, False at the agent's inactive steps (transparent, module docstring);
            ``None``: every step is active.

    Returns:
        ``NStepTargets(targets, discounts, horizon)``, each ``[B, T]``. No gradient flows through them.

    Raises:
        ValueError: ``gamma`` outside [0, 1], ``n`` not an integer >= 1, or a tensor not ``[B, T]`` like
            ``rewards``.
    """
    fn = "n_step_targets"
    check_gamma_n(fn, gamma, n)
    check_batch_major(fn, rewards=rewards, terminated=terminated, truncated=truncated, next_values=next_values,
                      trunc_values=trunc_values, active=active)
    gamma = float(gamma)
    with torch.no_grad():
        dtype = torch.promote_types(torch.promote_types(rewards.dtype, next_values.dtype), trunc_values.dtype)
        if not dtype.is_floating_point:
            dtype = torch.get_default_dtype()
        device = rewards.device
        r = rewards.detach().to(dtype)
        nv = next_values.detach().to(device=device, dtype=dtype)
        tv = trunc_values.detach().to(device=device, dtype=dtype)
        term = terminated.to(device=device, dtype=torch.bool)
        trunc = truncated.to(device=device, dtype=torch.bool) & ~term
        B, T = r.shape

        if active is None or bool(active.all()):
            length = torch.full((B, 1), T, dtype=torch.long, device=device)
            return _dense_n_step(r, term, trunc, nv, tv, gamma, n, length)

        act = active.to(device=device, dtype=torch.bool)
        r, term, trunc, nv, tv, length, block = _agent_steps(r, term, trunc, nv, tv, gamma, act)
        dense = _dense_n_step(r, term, trunc, nv, tv, gamma, n, length)
        # back from the agent's m-th step to the raw step it was taken at; inactive steps get zeros
        slot = block.clamp(min=0)
        return NStepTargets(*(torch.where(act, x.gather(1, slot), torch.zeros_like(x)) for x in dense))


def _dense_n_step(r: torch.Tensor, term: torch.Tensor, trunc: torch.Tensor, nv: torch.Tensor, tv: torch.Tensor,
                  gamma: float, n: int, length: torch.Tensor) -> NStepTargets:
    """All-active n-step targets of ``[B, T]`` sequences whose row ``b`` has ``length[b, 0]`` valid steps (the
    rest are padding, not read); ``trunc`` already excludes terminated steps. A loop over ``k < n`` only."""
    B, T = r.shape
    t = torch.arange(T, device=r.device)
    targets = torch.zeros_like(r)
    discounts = torch.zeros_like(r)
    horizon = torch.zeros((B, T), dtype=torch.long, device=r.device)
    alive = t.unsqueeze(0) < length  # windows still summing
    for k in range(n):
        j = (t + k).clamp(max=T - 1).unsqueeze(0).expand(B, T)
        g_k, g_k1 = gamma ** k, gamma ** (k + 1)
        targets = torch.where(alive, targets + g_k * r.gather(1, j), targets)
        horizon = horizon + alive.long()
        stop_term = alive & term.gather(1, j)
        stop_trunc = alive & trunc.gather(1, j)
        window_end = (k == n - 1) | ((t + k + 1).unsqueeze(0) >= length)
        last = alive & ~stop_term & ~stop_trunc & window_end
        # torch.where, not a product: the values a window does not read may be NaN
        targets = torch.where(stop_trunc, targets + g_k1 * tv.gather(1, j), targets)
        targets = torch.where(last, targets + g_k1 * nv.gather(1, j), targets)
        discounts = torch.where(stop_trunc | last, torch.full_like(discounts, g_k1), discounts)
        alive = alive & ~(stop_term | stop_trunc | last)
    return NStepTargets(targets, discounts, horizon)


def _agent_steps(r: torch.Tensor, term: torch.Tensor, trunc: torch.Tensor, nv: torch.Tensor, tv: torch.Tensor,
                 gamma: float, act: torch.Tensor):
    """The agent's own trajectory of every row, packed to the left of ``[B, T]``.

    Active step number ``m`` of row ``b`` (its "block": itself and the inactive steps up to the next active
    one) becomes slot ``m``: reward ``r_t + gamma * sum(r_j of the block's inactive steps up to its first
    episode end)``, terminated / truncated as the block's first end, ``trunc_values`` of that end, and
    ``next_values`` of the block's last step (the value of the observation the agent next decides on).
    Inactive steps before a row's first active step belong to no block (an earlier sequence's step).

    Returns ``(r, term, trunc, nv, tv, length [B, 1], block [B, T])``, ``block[b, t]`` the slot of step ``t``'s
    block (-1 before the first active step).
    """
    B, T = r.shape
    device = r.device
    pos = torch.arange(T, device=device).unsqueeze(0).expand(B, T)
    block = act.long().cumsum(1) - 1
    # flat ids of the blocks, one spare slot per row (id T) for the steps before the first active one
    flat = (torch.arange(B, device=device).unsqueeze(1) * (T + 1) + torch.where(block >= 0, block, T)).reshape(-1)
    size = B * (T + 1)

    ends = term | trunc
    no_end = torch.full((size,), T, dtype=torch.long, device=device)
    first_end = no_end.scatter_reduce(0, flat, torch.where(ends, pos, T).reshape(-1), reduce="amin")
    within = pos <= first_end.gather(0, flat).view(B, T)  # steps of the block up to its first episode end
    weight = torch.where(act, torch.ones_like(r), torch.full_like(r, gamma))
    contrib = torch.where(within, r * weight, torch.zeros_like(r)).reshape(-1)
    r_agent = torch.zeros(size, dtype=r.dtype, device=device).scatter_add(0, flat, contrib)
    last_pos = torch.full((size,), -1, dtype=torch.long, device=device).scatter_reduce(
        0, flat, pos.reshape(-1), reduce="amax")

    def per_block(x: torch.Tensor) -> torch.Tensor:
        return x.view(B, T + 1)[:, :T]

    r_agent, first_end, last_pos = per_block(r_agent), per_block(first_end), per_block(last_pos)
    has_end = first_end < T
    end_at = first_end.clamp(max=T - 1)
    term_agent = has_end & term.gather(1, end_at)
    trunc_agent = has_end & trunc.gather(1, end_at)
    tv_agent = tv.gather(1, end_at)
    nv_agent = nv.gather(1, last_pos.clamp(min=0))
    length = act.sum(1, keepdim=True)
    return r_agent, term_agent, trunc_agent, nv_agent, tv_agent, length, block
