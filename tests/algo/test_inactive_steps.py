"""Inactive steps (an agent waiting for its turn or sitting out) are transparent in V-trace and GAE: an
active step's target is the one of the trajectory with the inactive steps cut out (their rewards added to
the active step before them, their discounts without gamma), so the values and ratios of inactive steps,
which are never trained, reach no active step's target.

The reference is a plain loop that builds that shorter trajectory and sums IMPALA eq. 1 / GAE eq. 16 over
it term by term; the vectorised recursions must equal it."""

import numpy as np
import pytest
import torch

from sfx.algo._shapes import discounted_backward_scan
from sfx.algo.appo import APPOParams, appo_targets
from sfx.algo.gae import gae
from sfx.algo.vtrace import vtrace
from tests.algo.test_vtrace import vtrace_from_paper


def gae_explicit_sum(rewards, values, bootstrap, discounts, lam):
    """One column: A_t = sum_{l>=0} (prod_{i<l} discount_{t+i} lambda) delta_{t+l} (Schulman et al. 2016
    eq. 16 with per-step discounts), delta_t = r_t + discount_t V(x_{t+1}) - V(x_t); returns A + V."""
    n = len(values)
    v_next = [values[t + 1] if t + 1 < n else bootstrap for t in range(n)]
    adv = []
    for t in range(n):
        total, weight = 0.0, 1.0
        for k in range(t, n):
            total += weight * (rewards[k] + discounts[k] * v_next[k] - values[k])
            weight *= discounts[k] * lam
        adv.append(total)
    return [a + v for a, v in zip(adv, values)], adv


def without_inactive_steps(rewards, discounts, active):
    """One column: the active steps' indices and the shorter trajectory's rewards and discounts. An active step
    ``t`` followed by inactive ``t+1 .. t'-1``: reward ``r_t + discount_t (r_{t+1} + discount_{t+1} (r_{t+2} +
    ...))``, discount ``discount_t * prod discount_{t+1 .. t'-1}`` (an inactive step's is its carry factor)."""
    T = len(rewards)
    steps = [t for t in range(T) if active[t]]
    macro_r, macro_d = [], []
    for t in steps:
        r, d = rewards[t], discounts[t]
        k = t + 1
        while k < T and not active[k]:
            r += d * rewards[k]
            d *= discounts[k]
            k += 1
        macro_r.append(r)
        macro_d.append(d)
    return steps, macro_r, macro_d


def carried(own_at_active, bootstrap, rewards, discounts, active):
    """One column: an inactive step's result is ``r_t + discount_t * (the next step's result)``; ``own_at_active``
    maps an active step to its own result, and after the last step comes ``bootstrap``."""
    T = len(rewards)
    out = [0.0] * T
    nxt = bootstrap
    for t in reversed(range(T)):
        out[t] = own_at_active[t] if active[t] else rewards[t] + discounts[t] * nxt
        nxt = out[t]
    return out


def reference(log_rhos, discounts, rewards, values, bootstrap, active, method, rho_bar=1.0, c_bar=1.0, lam=1.0):
    """``[T, B]`` returns and advantages from the shorter trajectories, column by column."""
    T, B = values.shape
    returns, advantages = np.zeros((T, B)), np.zeros((T, B))
    for b in range(B):
        act = [bool(a) for a in active[:, b]]
        steps, macro_r, macro_d = without_inactive_steps(list(rewards[:, b]), list(discounts[:, b]), act)
        own_ret, own_adv = {}, {}
        if steps:
            v = np.array([values[t, b] for t in steps])
            if method == "vtrace":
                lr = np.array([[log_rhos[t, b]] for t in steps])
                vs, pg = vtrace_from_paper(lr, np.array(macro_d)[:, None], np.array(macro_r)[:, None], v[:, None],
                                           np.array([bootstrap[b]]), rho_bar, rho_bar, lam, c_bar)
                ret, adv = vs[:, 0], pg[:, 0]
            else:
                ret, adv = gae_explicit_sum(macro_r, list(v), bootstrap[b], macro_d, lam)
            own_ret = dict(zip(steps, ret))
            own_adv = dict(zip(steps, adv))
        returns[:, b] = carried(own_ret, bootstrap[b], rewards[:, b], discounts[:, b], act)
        advantages[:, b] = [own_adv.get(t, 0.0) for t in range(T)]
    return returns, advantages


def _t(x, dtype=torch.float64):
    return torch.tensor(np.asarray(x), dtype=dtype)


def run(method, log_rhos, discounts, rewards, values, bootstrap, active, rho_bar=1.0, c_bar=1.0, lam=1.0,
        dtype=torch.float64):
    if method == "vtrace":
        out = vtrace(_t(log_rhos, dtype), _t(discounts, dtype), _t(rewards, dtype), _t(values, dtype),
                     _t(bootstrap, dtype), clip_rho_threshold=rho_bar, clip_pg_rho_threshold=rho_bar, lambda_=lam,
                     clip_c_threshold=c_bar, active=torch.as_tensor(active))
    else:
        out = gae(_t(rewards, dtype), _t(values, dtype), _t(bootstrap, dtype), _t(discounts, dtype), lam,
                  active=torch.as_tensor(active))
    return out.returns.numpy(), out.advantages.numpy()


PATTERNS = {  # time-major [T, B] active masks; each column one agent
    "last steps inactive": [[1, 1], [1, 0], [1, 1], [0, 1], [0, 0], [0, 0]],
    "middle inactive": [[1, 1], [0, 0], [0, 1], [1, 0], [0, 0], [1, 1]],
    "turn-based": [[0, 1], [1, 0], [0, 1], [1, 0], [0, 1], [1, 0], [0, 1]],
    "none active": [[0], [0], [0]],
}


def _inputs(seed, active, done_rate=0.15):
    rng = np.random.default_rng(seed)
    T, B = active.shape
    log_rhos = rng.normal(0.0, 0.8, size=(T, B))
    dones = rng.random((T, B)) < done_rate
    gamma = 0.97
    # the carry factor of an inactive step is 1 - done (waiting is not a step of the agent), gamma elsewhere
    discounts = np.where(active, gamma, 1.0) * (1.0 - dones)
    return log_rhos, discounts, rng.normal(size=(T, B)), rng.normal(size=(T, B)), rng.normal(size=B)


@pytest.mark.parametrize("pattern", list(PATTERNS))
@pytest.mark.parametrize("method,lam,rho_bar,c_bar", [("vtrace", 1.0, 1.0, 1.0), ("vtrace", 0.9, 0.5, 1.0),
                                                      ("vtrace", 1.0, None, None), ("gae", 0.95, None, None),
                                                      ("gae", 1.0, None, None), ("gae", 0.0, None, None)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equals_the_loop_over_the_trajectory_without_inactive_steps(pattern, method, lam, rho_bar, c_bar, seed):
    active = np.array(PATTERNS[pattern], dtype=bool)
    log_rhos, discounts, rewards, values, bootstrap = _inputs(seed, active)
    got_ret, got_adv = run(method, log_rhos, discounts, rewards, values, bootstrap, active, rho_bar, c_bar, lam)
    ref_ret, ref_adv = reference(log_rhos, discounts, rewards, values, bootstrap, active, method, rho_bar, c_bar, lam)
    # float64 throughout: only rounding of a few dozen operations separates the two orders of summation
    np.testing.assert_allclose(got_ret, ref_ret, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_adv, ref_adv, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("pattern", ["last steps inactive", "middle inactive", "turn-based"])
@pytest.mark.parametrize("with_vtrace", [True, False])
def test_inactive_values_and_ratios_do_not_move_active_targets(pattern, with_vtrace):
    """Through appo_targets, as the learner calls it ([B, T], float32, normalised advantages): anything at the
    inactive steps' values and ratios, even NaN, leaves every active step's return and advantage as it was."""
    active = torch.tensor(PATTERNS[pattern], dtype=torch.bool).T.contiguous()  # [B, T]
    B, T = active.shape
    g = torch.Generator().manual_seed(3)
    rewards = torch.randn(B, T, generator=g)
    terminated = torch.rand(B, T, generator=g) < 0.1
    truncated = (torch.rand(B, T, generator=g) < 0.1) & ~terminated & active  # time limits on the agent's steps
    trunc_values = torch.randn(B, T, generator=g)
    values = torch.randn(B, T, generator=g)
    log_rhos = torch.randn(B, T, generator=g) * 0.5
    bootstrap = torch.randn(B, generator=g)
    params = APPOParams(gamma=0.99, reward_scale=1.0, reward_clip=10.0, with_vtrace=with_vtrace, vtrace_rho=1.0,
                        vtrace_c=1.0, gae_lambda=0.95, ppo_clip_ratio=0.1, ppo_clip_value=1.0,
                        exploration_loss="entropy", value_loss_coeff=0.5, exploration_loss_coeff=0.0,
                        kl_loss_coeff=0.0)

    def targets(v, lr):
        return appo_targets(rewards, terminated, truncated, trunc_values, v, bootstrap, lr, active, params,
                            active=active)

    base = targets(values, log_rhos)
    for other_values, other_rhos in [(values + 5.0 * (~active), log_rhos + 2.0 * (~active)),
                                     (torch.where(active, values, torch.full_like(values, float("nan"))),
                                      torch.where(active, log_rhos, torch.full_like(log_rhos, float("nan"))))]:
        moved = targets(other_values, other_rhos)
        assert torch.equal(moved.returns[active], base.returns[active])
        assert torch.equal(moved.advantages[active], base.advantages[active])
    # the inactive steps' own rewards do reach the active steps before them
    moved = appo_targets(rewards + 1.0 * (~active), terminated, truncated, trunc_values, values, bootstrap, log_rhos,
                         active, params, active=active)
    assert not torch.equal(moved.returns[active], base.returns[active])


def test_waiting_steps_do_not_discount():
    """The agent acts at steps 0 and 3 and waits between: its return at step 0 discounts step 3's reward once."""
    active = np.array([[1], [0], [0], [1]], dtype=bool)
    rewards = np.array([[0.0], [0.0], [0.0], [1.0]])
    discounts = np.array([[0.9], [1.0], [1.0], [0.0]])  # the episode ends after step 3
    for method in ("vtrace", "gae"):
        ret, adv = run(method, np.zeros((4, 1)), discounts, rewards, np.zeros((4, 1)), np.zeros(1), active, lam=1.0)
        assert ret[0, 0] == pytest.approx(0.9) and ret[3, 0] == pytest.approx(1.0)
        assert adv[1, 0] == 0.0 and adv[2, 0] == 0.0


def test_a_loss_on_a_waiting_step_reaches_the_last_move():
    """Turn-based: the opponent's winning move gives the waiting agent -1 on an inactive, terminal step; the
    agent's last move gets -gamma, whatever the (untrained) values of its waiting steps."""
    active = torch.tensor([[False, True, False, True, False]])
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, -1.0]])
    terminated = torch.tensor([[False, False, False, False, True]])
    params = APPOParams(gamma=0.99, reward_scale=1.0, reward_clip=10.0, with_vtrace=True, vtrace_rho=1.0,
                        vtrace_c=1.0, gae_lambda=0.95, ppo_clip_ratio=0.1, ppo_clip_value=1.0,
                        exploration_loss="entropy", value_loss_coeff=0.5, exploration_loss_coeff=0.0,
                        kl_loss_coeff=0.0)
    values = torch.tensor([[7.0, 0.3, -4.0, 0.5, 9.0]])
    for with_vtrace in (True, False):
        p = APPOParams(**{**params.__dict__, "with_vtrace": with_vtrace, "gae_lambda": 1.0})
        out = appo_targets(rewards, terminated, torch.zeros_like(terminated), torch.zeros(1, 5), values,
                           torch.tensor([3.0]), torch.zeros(1, 5), active, p, active=active)
        assert out.returns[0, 3].item() == pytest.approx(-0.99)
        assert out.returns[0, 1].item() == pytest.approx(-0.99 ** 2)


def _recursions_before_inactive_steps(method, log_rhos, discounts, rewards, values, bootstrap, lam):
    """The vectorised V-trace (rho_bar = c_bar = 1) and GAE as they were before inactive steps existed."""
    values_tp1 = torch.cat([values[1:], bootstrap.unsqueeze(0)], dim=0)
    if method == "gae":
        adv = discounted_backward_scan(rewards + discounts * values_tp1 - values, discounts * lam)
        return adv + values, adv
    rhos = torch.exp(log_rhos)
    clipped = torch.clamp(rhos, max=1.0)
    vs = values + discounted_backward_scan(clipped * (rewards + discounts * values_tp1 - values),
                                           discounts * (lam * clipped))
    vs_tp1 = torch.cat([vs[1:], bootstrap.unsqueeze(0)], dim=0)
    return vs, clipped * (rewards + discounts * vs_tp1 - values)


@pytest.mark.parametrize("method", ["vtrace", "gae"])
def test_all_active_is_the_recursion_without_inactive_steps_to_the_bit(method):
    T, B = 16, 4
    active = np.ones((T, B), dtype=bool)
    log_rhos, discounts, rewards, values, bootstrap = _inputs(5, active, done_rate=0.2)
    ret, adv = run(method, log_rhos, discounts, rewards, values, bootstrap, active, lam=0.95, dtype=torch.float32)
    f32 = [_t(x, torch.float32) for x in (log_rhos, discounts, rewards, values, bootstrap)]
    old_ret, old_adv = _recursions_before_inactive_steps(method, *f32, 0.95)
    assert np.array_equal(ret, old_ret.numpy()) and np.array_equal(adv, old_adv.numpy())


def test_active_of_the_wrong_shape_is_reported():
    with pytest.raises(ValueError, match="active"):
        vtrace(torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(2),
               active=torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="active"):
        gae(torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(2), torch.zeros(3, 2), 0.9,
            active=torch.ones(3, dtype=torch.bool))
