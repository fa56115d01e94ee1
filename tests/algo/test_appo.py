"""APPO's targets and loss terms against plain loops over t and b written from the papers:
V-trace (Espeholt et al. 2018, eq. 1 and section 4.2), GAE (Schulman et al. 2016, eq. 16) and the
clipped PPO objective (Schulman et al. 2017, eq. 7 and 9)."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from sfx.algo.appo import LOSS_TERMS, APPOParams, LossTerms, appo_loss_terms, appo_targets, normalize_advantages
from sfx.algo.distributions import Categorical
from sfx.algo.targets import Targets

PARAMS = APPOParams(gamma=0.9, reward_scale=0.5, reward_clip=1.0, with_vtrace=True, vtrace_rho=1.0, vtrace_c=0.8,
                    gae_lambda=0.7, ppo_clip_ratio=0.2, ppo_clip_value=0.3, exploration_loss="entropy",
                    value_loss_coeff=0.5, exploration_loss_coeff=0.01, kl_loss_coeff=0.1)


def _batch(seed, B=3, T=6, A=4):
    """A tiny batch, batch-major [B, T], with episode ends, time limits and invalid samples."""
    g = torch.Generator().manual_seed(seed)
    terminated = torch.rand(B, T, generator=g) < 0.2
    truncated = (torch.rand(B, T, generator=g) < 0.2) & ~terminated
    truncated[0, 2] = True  # at least one of each
    terminated[1, 3] = True
    truncated[1, 3] = False
    valids = torch.rand(B, T, generator=g) < 0.8
    valids[2, 0] = False
    return dict(
        rewards=torch.randn(B, T, generator=g, dtype=torch.float64) * 3,  # some beyond the clip
        terminated=terminated, truncated=truncated,
        trunc_values=torch.randn(B, T, generator=g, dtype=torch.float64),
        values=torch.randn(B, T, generator=g, dtype=torch.float64),
        bootstrap=torch.randn(B, generator=g, dtype=torch.float64),
        log_rhos=torch.randn(B, T, generator=g, dtype=torch.float64) * 0.7,
        valids=valids,
        logits=torch.randn(B * T, A, generator=g, dtype=torch.float64),
        old_logits=torch.randn(B * T, A, generator=g, dtype=torch.float64),
        actions=torch.randint(0, A, (B * T,), generator=g),
        values_norm=torch.randn(B, T, generator=g, dtype=torch.float64),
        old_values_norm=torch.randn(B, T, generator=g, dtype=torch.float64),
        returns_norm=torch.randn(B, T, generator=g, dtype=torch.float64),
    )


def targets_from_papers(d, p):
    """Plain loops: reward shaping, then V-trace as the explicit sum of eq. 1 or GAE as eq. 16, then
    advantages standardized over the valid samples (unbiased std)."""
    rewards, values, bootstrap = d["rewards"].tolist(), d["values"].tolist(), d["bootstrap"].tolist()
    B, T = len(rewards), len(rewards[0])
    r = [[0.0] * T for _ in range(B)]
    disc = [[0.0] * T for _ in range(B)]
    for b in range(B):
        for t in range(T):
            r[b][t] = min(max(rewards[b][t] * p.reward_scale, -p.reward_clip), p.reward_clip)
            if d["truncated"][b, t]:
                r[b][t] += p.gamma * float(d["trunc_values"][b, t])  # a time limit: bootstrap V(final obs)
            ended = bool(d["terminated"][b, t]) or bool(d["truncated"][b, t])
            disc[b][t] = 0.0 if ended else p.gamma
    returns = [[0.0] * T for _ in range(B)]
    adv = [[0.0] * T for _ in range(B)]
    for b in range(B):
        v_next = [values[b][t + 1] if t + 1 < T else bootstrap[b] for t in range(T)]
        if p.with_vtrace:
            rho = [math.exp(float(d["log_rhos"][b, t])) for t in range(T)]
            for s in range(T):
                total = 0.0
                for t in range(s, T):
                    weight = 1.0
                    for i in range(s, t):
                        weight *= disc[b][i] * p.vtrace_lambda * min(p.vtrace_c, rho[i])  # c_i (remark 2)
                    total += weight * min(p.vtrace_rho, rho[t]) * (r[b][t] + disc[b][t] * v_next[t] - values[b][t])
                returns[b][s] = values[b][s] + total
            for t in range(T):
                vs_next = returns[b][t + 1] if t + 1 < T else bootstrap[b]
                adv[b][t] = min(p.vtrace_rho, rho[t]) * (r[b][t] + disc[b][t] * vs_next - values[b][t])
        else:
            for t in range(T):
                total, weight = 0.0, 1.0
                for k in range(t, T):
                    total += weight * (r[b][k] + disc[b][k] * v_next[k] - values[b][k])
                    weight *= disc[b][k] * p.gae_lambda
                adv[b][t] = total
                returns[b][t] = total + values[b][t]
    valid = [adv[b][t] for b in range(B) for t in range(T) if d["valids"][b, t]]
    mean = sum(valid) / len(valid)
    std = math.sqrt(sum((x - mean) ** 2 for x in valid) / (len(valid) - 1))
    adv = [[(adv[b][t] - mean) / (std + 1e-8) for t in range(T)] for b in range(B)]
    return np.array(returns), np.array(adv)


def loss_terms_from_paper(d, targets, p):
    """Plain loops over the valid samples: PPO's clipped surrogate (eq. 7) and clipped value loss,
    softmax entropy, KL(behaviour || current), symmetric KL to uniform, and the diagnostics."""
    B, T = d["values"].shape
    A = d["logits"].shape[1]
    adv, returns = targets.advantages.tolist(), targets.returns.tolist()
    sums = dict(policy=0.0, value=0.0, entropy=0.0, sym_kl=0.0, kl=0.0, ratio=0.0)
    n = 0
    for b in range(B):
        for t in range(T):
            if not d["valids"][b, t]:
                continue
            n += 1
            row = b * T + t
            z = [math.exp(x) for x in d["logits"][row].tolist()]
            pi = [x / sum(z) for x in z]
            zo = [math.exp(x) for x in d["old_logits"][row].tolist()]
            mu = [x / sum(zo) for x in zo]
            a = int(d["actions"][row])
            ratio = pi[a] / mu[a]
            A_t = adv[b][t]
            eps = p.ppo_clip_ratio
            sums["policy"] -= min(ratio * A_t, min(max(ratio, 1 - eps), 1 + eps) * A_t)
            v, v_old, R = (float(d["values_norm"][b, t]), float(d["old_values_norm"][b, t]),
                           float(d["returns_norm"][b, t]))
            v_clip = v_old + min(max(v - v_old, -p.ppo_clip_value), p.ppo_clip_value)
            if p.ppo_clip_value > 0:
                sums["value"] += 0.5 * max((v - R) ** 2, (v_clip - R) ** 2)
            else:  # <= 0: no value clipping
                sums["value"] += 0.5 * (v - R) ** 2
            sums["entropy"] += -sum(x * math.log(x) for x in pi)
            kl_pi_u = sum(x * math.log(x * A) for x in pi)
            kl_u_pi = sum((1 / A) * math.log((1 / A) / x) for x in pi)
            sums["sym_kl"] += 0.5 * (kl_pi_u + kl_u_pi)
            sums["kl"] += sum(m * math.log(m / x) for m, x in zip(mu, pi))
            sums["ratio"] += ratio
    mean = {k: v / n for k, v in sums.items()}
    all_adv = [x for row in adv for x in row]
    adv_mean = sum(all_adv) / len(all_adv)
    exploration = min(mean["sym_kl"], 30.0) if p.exploration_loss == "symmetric_kl" else -mean["entropy"]
    return dict(policy=mean["policy"], value=mean["value"], exploration=exploration, kl=mean["kl"],
                entropy=mean["entropy"], ratio_mean=mean["ratio"],
                adv_std=math.sqrt(sum((x - adv_mean) ** 2 for x in all_adv) / (len(all_adv) - 1)),
                value_mean=float(d["values"].mean()), target_mean=sum(x for row in returns for x in row) / (B * T))


def _targets(d, p):
    return appo_targets(d["rewards"], d["terminated"], d["truncated"], d["trunc_values"], d["values"], d["bootstrap"],
                        d["log_rhos"] if p.with_vtrace else None, d["valids"], p)


def _loss_terms(d, targets, p):
    dist, old_dist = Categorical(d["logits"]), Categorical(d["old_logits"])
    B, T = d["values"].shape
    log_prob = dist.log_prob(d["actions"]).reshape(B, T)
    old_log_prob = old_dist.log_prob(d["actions"]).reshape(B, T)
    return appo_loss_terms(dist, old_dist, log_prob, old_log_prob, targets, d["returns_norm"], d["values"],
                           d["values_norm"], d["old_values_norm"], d["valids"], p)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("changes", [{}, {"with_vtrace": False}, {"vtrace_rho": 1.5, "vtrace_c": 1.0},
                                     {"with_vtrace": False, "gae_lambda": 1.0, "gamma": 0.99},
                                     {"vtrace_lambda": 0.6}, {"vtrace_lambda": 0.0, "vtrace_c": 1.0}])
def test_targets_match_the_papers(seed, changes):
    p = dataclasses.replace(PARAMS, **changes)
    d = _batch(seed)
    out = _targets(d, p)
    assert isinstance(out, Targets) and out.returns.shape == d["rewards"].shape
    ref_returns, ref_adv = targets_from_papers(d, p)
    np.testing.assert_allclose(out.returns.numpy(), ref_returns, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out.advantages.numpy(), ref_adv, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("changes", [{}, {"exploration_loss": "symmetric_kl"}, {"ppo_clip_value": 0.0},
                                     {"ppo_clip_ratio": 0.05}])
def test_loss_terms_match_the_ppo_paper(seed, changes):
    p = dataclasses.replace(PARAMS, **changes)
    d = _batch(seed)
    targets = _targets(d, p)
    terms = _loss_terms(d, targets, p)
    assert isinstance(terms, LossTerms)
    ref = loss_terms_from_paper(d, targets, p)
    for name in LossTerms._fields[:-1]:  # all but policy_stats (None with PPO)
        assert getattr(terms, name).item() == pytest.approx(ref[name], rel=1e-10, abs=1e-12), name


def test_a_wrong_reference_fails():
    """The comparisons above can fail: a reference with one thing changed no longer matches."""
    d = _batch(0)
    out = _targets(d, PARAMS)
    for wrong in ({"gamma": 0.8}, {"reward_clip": 10.0}, {"vtrace_c": 1.0}, {"vtrace_lambda": 0.9}):
        ref_returns, ref_adv = targets_from_papers(d, dataclasses.replace(PARAMS, **wrong))
        with pytest.raises(AssertionError):
            np.testing.assert_allclose(out.returns.numpy(), ref_returns, rtol=1e-10, atol=1e-12)
    d_no_trunc = dict(d, truncated=torch.zeros_like(d["truncated"]))  # a time limit ignored
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(out.returns.numpy(), targets_from_papers(d_no_trunc, PARAMS)[0], rtol=1e-10)
    terms = _loss_terms(d, out, PARAMS)
    wrong = loss_terms_from_paper(d, out, dataclasses.replace(PARAMS, ppo_clip_ratio=0.3))
    assert terms.policy.item() != pytest.approx(wrong["policy"], rel=1e-10, abs=1e-12)
    wrong = loss_terms_from_paper(dict(d, valids=torch.ones_like(d["valids"])), out, PARAMS)
    assert terms.value.item() != pytest.approx(wrong["value"], rel=1e-10, abs=1e-12)


def test_loss_terms_carry_the_gradient_and_diagnostics_do_not():
    d = _batch(3)
    d["logits"].requires_grad_()
    d["values_norm"].requires_grad_()
    terms = _loss_terms(d, _targets(d, PARAMS), PARAMS)
    for name in LossTerms._fields[:-1]:  # all but policy_stats (None with PPO)
        assert getattr(terms, name).requires_grad == (name in LOSS_TERMS), name
    assert list(PARAMS.coefficients) == list(LOSS_TERMS)


def test_advantages_standardized_over_valid_samples_only():
    adv = torch.tensor([[1.0, 2.0, 3.0, 100.0]])
    valids = torch.tensor([[True, True, True, False]])
    out = normalize_advantages(adv, valids)
    assert out[valids].mean().item() == pytest.approx(0.0, abs=1e-6)
    assert out[valids].std().item() == pytest.approx(1.0, rel=1e-6)
    one_valid = torch.tensor([[True, False, False, False]])
    assert torch.equal(normalize_advantages(adv, one_valid), adv)  # no statistics from one sample


def test_bad_params_are_reported():
    with pytest.raises(ValueError, match="exploration_loss='entropi'"):
        dataclasses.replace(PARAMS, exploration_loss="entropi")
    d = _batch(0)
    with pytest.raises(ValueError, match="log_rhos"):
        appo_targets(d["rewards"], d["terminated"], d["truncated"], d["trunc_values"], d["values"], d["bootstrap"],
                     None, d["valids"], PARAMS)


def test_params_from_cfg_reads_the_cfg_fields():
    from sfx.registries import default_cfg

    cfg = default_cfg(gamma=0.95, exploration_loss="symmetric_kl", kl_loss_coeff=0.2, vtrace_lambda=0.9)
    p = APPOParams.from_cfg(cfg)
    assert (p.gamma, p.exploration_loss, p.coefficients["kl"], p.vtrace_lambda) == (0.95, "symmetric_kl", 0.2, 0.9)
    assert p.coefficients["value"] == cfg.value_loss_coeff


def test_replayed_rows_with_the_impala_loss():
    """--replayed_loss=impala: replayed samples contribute -A log pi (no ratio clip) and the unclipped squared error
    (no clip around their stale values), fresh ones PPO's terms; each term averages over all valid samples. Written
    out sample by sample."""
    d = _batch(4)
    d["logits"].requires_grad_()
    d["values_norm"].requires_grad_()
    p = dataclasses.replace(PARAMS, replayed_loss="impala", ppo_clip_value=0.2)
    targets = _targets(d, p)
    B, T = d["values"].shape
    replayed = torch.zeros(B, T, dtype=torch.bool)
    replayed[1] = True
    dist, old_dist = Categorical(d["logits"]), Categorical(d["old_logits"])
    log_prob = dist.log_prob(d["actions"]).reshape(B, T)
    old_log_prob = old_dist.log_prob(d["actions"]).reshape(B, T)
    terms = appo_loss_terms(dist, old_dist, log_prob, old_log_prob, targets, d["returns_norm"], d["values"],
                            d["values_norm"], d["old_values_norm"], d["valids"], p, replayed=replayed)
    policy, value, n = 0.0, 0.0, 0
    eps, clip = p.ppo_clip_ratio, p.ppo_clip_value
    for b in range(B):
        for t in range(T):
            if not d["valids"][b, t]:
                continue
            n += 1
            a, lp, olp = float(targets.advantages[b, t]), float(log_prob[b, t]), float(old_log_prob[b, t])
            v, ov, r = float(d["values_norm"][b, t]), float(d["old_values_norm"][b, t]), float(d["returns_norm"][b, t])
            if replayed[b, t]:
                policy += -a * lp
                value += 0.5 * (v - r) ** 2
            else:
                ratio = math.exp(lp - olp)
                policy += -min(ratio * a, min(max(ratio, 1 - eps), 1 + eps) * a)
                vc = ov + min(max(v - ov, -clip), clip)
                value += 0.5 * max((v - r) ** 2, (vc - r) ** 2)
    assert terms.policy.item() == pytest.approx(policy / n, rel=1e-10)
    assert terms.value.item() == pytest.approx(value / n, rel=1e-10)
    # the default trains replayed rows like fresh ones, bit for bit as without the mask
    plain = _loss_terms(d, targets, dataclasses.replace(p, replayed_loss="ppo"))
    default = appo_loss_terms(dist, old_dist, log_prob, old_log_prob, targets, d["returns_norm"], d["values"],
                              d["values_norm"], d["old_values_norm"], d["valids"],
                              dataclasses.replace(p, replayed_loss="ppo"), replayed=replayed)
    assert torch.equal(plain.policy, default.policy) and torch.equal(plain.value, default.value)
