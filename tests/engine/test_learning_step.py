"""The learner's step without processes: ``learning_step`` gives the loss, gradients and weights of
the learner's formula as it was written inline before ``sfx.algo.appo`` (re-implemented below),
and skips non-finite minibatches without touching the weights."""

import copy
import logging

import pytest
import torch

from sfx.algo.distributions import make_action_distribution
from sfx.algo.gae import gae
from sfx.algo.normalizers import RunningMeanStd
from sfx.algo.ppo import entropy_loss, kl_loss, masked_mean, ppo_policy_loss, ppo_value_loss, symmetric_kl_loss
from sfx.algo.vtrace import vtrace
from sfx.registries import default_cfg
from sfx.engine.coordinator import probe_env
from sfx.agents import NonFiniteBatch
from sfx.agents.appo import APPO, learning_step, make_optimizer, running_advantage_normalization
from sfx.engine.learner import Learner
from sfx.models import create_actor_critic


def _setup(tmp_path, num_tasks=1, **overrides):
    base = dict(rollout=8, recurrence=4, batch_size=32, hidden_size=16, device="cpu", reward_clip=2.0,
                train_dir=str(tmp_path))
    base.update(overrides)
    cfg = default_cfg(**base)
    info = probe_env(cfg)
    torch.manual_seed(0)
    model = create_actor_critic(cfg, info.observation_space, info.action_space, num_tasks=num_tasks).train()
    return cfg, model


def _batch(model, n, T, seed):
    """A minibatch shaped like TrajectoryBuffers.tensors(), the behaviour policy a random one."""
    g = torch.Generator().manual_seed(seed)
    S = max(model.rnn_state_size, 1)
    P = model.action_params_size
    params = torch.randn(n, T, P, generator=g) * 0.5
    dist = make_action_distribution(model.action_space, params.reshape(n * T, P))
    torch.manual_seed(seed)
    actions = dist.sample().reshape(n, T, -1).float()
    mb = dict(obs={"obs": torch.randn(n, T + 1, *model.obs_space.shape, generator=g)},
              rnn_states=torch.randn(n, T + 1, S, generator=g) * 0.3, actions=actions,
              log_probs=dist.log_prob(actions.reshape(n * T, -1)).reshape(n, T), action_params=params,
              values=torch.randn(n, T, generator=g), rewards=torch.randn(n, T, generator=g) * 3,
              terminated=torch.rand(n, T, generator=g) < 0.1, truncated=torch.rand(n, T, generator=g) < 0.05,
              trunc_values=torch.randn(n, T, generator=g), policy_versions=torch.zeros(n, T, dtype=torch.long),
              active=torch.ones(n, T, dtype=torch.bool),
              task=torch.arange(n) % model.num_tasks)  # trajectories of every task in turn
    return mb, torch.rand(n, T, generator=g) < 0.85


def reference_step(cfg, model, optimizer, mb, valids, running=None):
    """The learner's minibatch formula as it was inline in Learner._train_minibatch. ``running``: a list of
    every earlier minibatch's valid advantages (float64): --advantage_normalization=running divides by
    their std together with this minibatch's instead of this minibatch's own."""
    n, T = mb["rewards"].shape
    R = cfg.recurrence if cfg.use_rnn else T
    obs = mb["obs"]
    done = mb["terminated"] | mb["truncated"]
    seq_obs = {k: v[:, :T].reshape(n * T // R, R, *v.shape[2:]) for k, v in obs.items()}
    seq_init = mb["rnn_states"][:, 0:T:R].reshape(n * T // R, -1)
    prev_done = torch.cat([torch.zeros_like(done[:, :1]), done[:, :-1]], dim=1)
    out = model.forward_sequence(seq_obs, seq_init, prev_done.reshape(n * T // R, R))
    params = out["action_params"].reshape(n * T, -1)
    values_norm = out["values_normalized"].reshape(n, T)
    values = out["values"].reshape(n, T)
    with torch.no_grad():
        bootstrap = model.forward_step({k: v[:, T] for k, v in obs.items()}, mb["rnn_states"][:, T])["values"]
    dist = make_action_distribution(model.action_space, params)
    log_prob = dist.log_prob(mb["actions"].reshape(n * T, -1)).reshape(n, T)
    old_dist = make_action_distribution(model.action_space, mb["action_params"].reshape(n * T, -1))

    def tm(x):
        return x.transpose(0, 1)

    rewards = (mb["rewards"] * cfg.reward_scale).clamp(-cfg.reward_clip, cfg.reward_clip)
    rewards = rewards + cfg.gamma * mb["truncated"].float() * mb["trunc_values"]
    discounts = cfg.gamma * (1.0 - done.float())
    with torch.no_grad():
        if cfg.with_vtrace:
            log_rhos = log_prob.detach() - mb["log_probs"]
            out = vtrace(tm(log_rhos), tm(discounts), tm(rewards), tm(values.detach()), bootstrap,
                         clip_rho_threshold=cfg.vtrace_rho, clip_pg_rho_threshold=cfg.vtrace_rho,
                         lambda_=1.0, clip_c_threshold=cfg.vtrace_c)
        else:
            out = gae(tm(rewards), tm(values.detach()), bootstrap, tm(discounts), cfg.gae_lambda)
        vs, adv = tm(out.returns), tm(out.advantages)
        if cfg.normalize_returns and model.returns_normalizer is not None:
            model.returns_normalizer.update(vs[valids])
        targets_norm = model.normalize_values(vs)
        old_values_norm = model.normalize_values(mb["values"])
        adv_valid = adv[valids]
        if running is not None:
            running.append(adv_valid.double())
        if adv_valid.numel() > 1:
            scale = adv_valid.std() if running is None else torch.cat(running).std().float()
            adv = (adv - adv_valid.mean()) / (scale + 1e-8)
    policy_loss, ratio = ppo_policy_loss(log_prob, mb["log_probs"], adv, cfg.ppo_clip_ratio, valids)
    value_loss = ppo_value_loss(values_norm, old_values_norm, targets_norm, cfg.ppo_clip_value, valids)
    entropy = dist.entropy().reshape(n, T)
    if cfg.exploration_loss == "symmetric_kl":
        ent_loss = symmetric_kl_loss(dist.symmetric_kl_with_uniform().reshape(n, T), valids)
    else:
        ent_loss = entropy_loss(entropy, valids)
    kl = old_dist.kl_divergence(dist).reshape(n, T)
    kl_term = kl_loss(kl, valids)
    loss = (policy_loss + cfg.value_loss_coeff * value_loss + cfg.exploration_loss_coeff * ent_loss
            + cfg.kl_loss_coeff * kl_term)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
    optimizer.step()
    return {
        "loss/total": loss.item(), "loss/policy": policy_loss.item(), "loss/value": value_loss.item(),
        f"loss/{cfg.exploration_loss}": ent_loss.item(), "loss/kl": kl_term.item(),
        "entropy": float(masked_mean(entropy.detach(), valids)), "kl": float(masked_mean(kl.detach(), valids)),
        "grad_norm": float(grad_norm), "ratio_mean": float(masked_mean(ratio.detach(), valids)),
        "adv_std": float(adv.std()), "value_mean": float(values.detach().mean()), "target_mean": float(vs.mean()),
    }


CASES = [
    dict(with_vtrace=True, use_rnn=True),
    dict(with_vtrace=True, use_rnn=False),
    dict(with_vtrace=False, use_rnn=True),
    dict(with_vtrace=False, use_rnn=False),
    dict(with_vtrace=True, use_rnn=True, exploration_loss="symmetric_kl", kl_loss_coeff=0.3, normalize_returns=False),
    dict(env="gym_Pendulum-v1", with_vtrace=False, use_rnn=True, rnn_type="lstm", kl_loss_coeff=0.1),
]


@pytest.mark.parametrize("overrides", CASES, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_learning_step_equals_the_inline_formula(tmp_path, overrides):
    cfg, model = _setup(tmp_path, **overrides)
    ref_model = copy.deepcopy(model)
    opt, ref_opt = make_optimizer(cfg, model), make_optimizer(cfg, ref_model)
    for step in range(3):  # later steps also check the optimizer and normalizer state carried over
        mb, valids = _batch(model, 4, cfg.rollout, seed=step)
        stats = learning_step(model, opt, mb, valids, cfg)
        ref = reference_step(cfg, ref_model, ref_opt, mb, valids)
        assert stats == ref  # same keys, bit for bit
        for (name, p), q in zip(model.named_parameters(), ref_model.parameters()):
            assert torch.equal(p.grad, q.grad), name
            assert torch.equal(p, q), name
        for (name, b), c in zip(model.named_buffers(), ref_model.buffers()):
            assert torch.equal(b, c), name


def test_running_advantage_normalization_divides_by_the_std_of_every_advantage_so_far(tmp_path):
    """--advantage_normalization=running (auto's choice without PopArt): the minibatch's mean is subtracted as before, but the
    scale is the unbiased std of every valid advantage of the run so far (the learner's RunningMeanStd, float64
    moments merged batch by batch), so the first minibatch is normalized exactly as with
    --advantage_normalization=minibatch and later ones are not rescaled to unit spread."""
    cfg, model = _setup(tmp_path)
    ref_model, plain_model = copy.deepcopy(model), copy.deepcopy(model)
    opt, ref_opt, plain_opt = (make_optimizer(cfg, m) for m in (model, ref_model, plain_model))
    advantage_stats, seen = RunningMeanStd((), clip=None), []
    for step in range(3):
        mb, valids = _batch(model, 4, cfg.rollout, seed=step)
        if step == 2:
            mb["rewards"] = mb["rewards"] * 0.01  # advantages shrink: the running scale does not follow at once
        stats = learning_step(model, opt, mb, valids, cfg, None, advantage_stats)
        ref = reference_step(cfg, ref_model, ref_opt, mb, valids, running=seen)
        # the scale comes from float64 moments merged batch by batch instead of one float64 std over all of
        # them: equal to ~1e-15, i.e. the same float32 value but for a rare last-bit rounding
        assert stats == pytest.approx(ref, rel=1e-6, abs=1e-7)
        for (name, p), q in zip(model.named_parameters(), ref_model.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7, msg=name)
        plain = learning_step(plain_model, plain_opt, mb, valids, cfg)  # --advantage_normalization=minibatch
        if step == 0:
            assert plain == pytest.approx(stats, rel=1e-6, abs=1e-7)
    assert advantage_stats.count.item() == sum(len(a) for a in seen)
    assert stats["adv_std"] < 0.5 < plain["adv_std"]  # smaller advantages stay smaller (minibatch: unit spread)


@pytest.mark.parametrize("mode,popart,running", [("auto", False, True), ("auto", True, False), ("running", True, True),
                                                 ("minibatch", False, False)])
def test_which_advantage_normalization_auto_picks(tmp_path, mode, popart, running):
    """auto: running, but minibatch with PopArt (its sigma rescales each task's advantages while it learns)."""
    cfg, _ = _setup(tmp_path, advantage_normalization=mode, popart=popart)
    assert running_advantage_normalization(cfg) == running


def test_a_changed_formula_is_caught(tmp_path):
    """The comparison above can fail: a different value coefficient gives other numbers."""
    cfg, model = _setup(tmp_path)
    ref_model = copy.deepcopy(model)
    mb, valids = _batch(model, 4, cfg.rollout, seed=0)
    stats = learning_step(model, make_optimizer(cfg, model), mb, valids, cfg)
    other = copy.copy(cfg)
    other.value_loss_coeff = cfg.value_loss_coeff * 1.01
    assert reference_step(other, ref_model, make_optimizer(cfg, ref_model), mb, valids) != stats


def test_max_grad_norm_zero_means_no_clipping(tmp_path):
    """--max_grad_norm <= 0 disables clipping (an unbounded clip_grad_norm_ of 0 would zero every gradient)."""
    cfg, model = _setup(tmp_path, max_grad_norm=0.0)
    mb, valids = _batch(model, 4, cfg.rollout, seed=0)
    unclipped = copy.deepcopy(model)
    cfg_big = copy.copy(cfg)
    cfg_big.max_grad_norm = 1e30
    stats = learning_step(model, make_optimizer(cfg, model), mb, valids, cfg)
    big = learning_step(unclipped, make_optimizer(cfg, unclipped), mb, valids, cfg_big)
    assert stats["grad_norm"] == big["grad_norm"] > 0
    for p, q in zip(model.parameters(), unclipped.parameters()):
        assert torch.equal(p.grad, q.grad)


@pytest.mark.parametrize("where", ["value targets / advantages", "loss"])
def test_non_finite_minibatch_changes_nothing(tmp_path, where):
    cfg, model = _setup(tmp_path, normalize_returns=False)
    opt = make_optimizer(cfg, model)
    mb, valids = _batch(model, 4, cfg.rollout, seed=0)
    if where == "loss":
        mb["values"][0, 0] = float("nan")  # an old value: only the value loss sees it
        valids[0, 0] = True
    else:
        mb["rewards"][1, 2] = float("nan")
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(NonFiniteBatch) as e:
        learning_step(model, opt, mb, valids, cfg)
    assert e.value.where == where
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


class _Stub:
    def __init__(self):
        self.published = []

    def publish(self, model, version):
        self.published.append(version)


def test_learner_skips_and_counts_a_non_finite_minibatch(tmp_path, caplog):
    cfg, model = _setup(tmp_path, max_nan_batches=2)
    weights = _Stub()
    learner = Learner(cfg, 0, APPO, model, None, weights, None, None, torch.device("cpu"))
    mb, valids = _batch(model, 4, cfg.rollout, seed=0)
    for _ in range(2):
        assert set(learner._train_minibatch(mb, valids)) >= {"loss/total", "loss/entropy", "grad_norm"}
    assert (learner.train_step, weights.published) == (2, [1, 2])
    mb["rewards"][0, 0] = float("inf") - float("inf")
    with caplog.at_level(logging.WARNING):
        assert learner._train_minibatch(mb, valids) is None
    assert "value targets / advantages not finite in a minibatch" in caplog.text and "rewards[min" in caplog.text
    assert (learner.nan_batches, learner.consecutive_nan_batches, learner.train_step) == (1, 1, 2)
    with pytest.raises(FloatingPointError, match="2 minibatches in a row"):
        learner._train_minibatch(mb, valids)
