"""APPO's --minibatch_unit=transitions (sfx/agents/appo.py): an iteration's targets computed once over whole
trajectories, then single steps shuffled across them, as PPO's implementations (Baselines' ppo2, SB3) train.
Checked against a plain reference: GAE written from the paper as a loop over each whole trajectory with the
weights at the iteration's start, then PPO's minibatch formula on each epoch's shuffled steps."""

import copy

import pytest
import torch

from sfx.agents.appo import APPO, iteration_targets, minibatch_unit
from sfx.agents.base import Batch
from sfx.algo.distributions import make_action_distribution
from sfx.algo.ppo import entropy_loss, ppo_policy_loss, ppo_value_loss
from sfx.cfg import ConfigError
from sfx.registries import default_cfg
from tests.engine.test_learning_step import _batch, _setup


def _as_batch(mb, valids):
    n = valids.shape[0]
    return Batch(data=mb, valids=valids, fresh=torch.ones(n, dtype=torch.bool), age=torch.zeros(valids.shape),
                 env_steps=int(valids.numel()), ids=torch.full((n,), -1))


def gae_loop(cfg, model, mb):
    """GAE (Schulman et al. 2016, eq. 16) backwards over each whole trajectory, values of ``model`` one step at a
    time; a time limit folds the final observation's value into the reward, an episode end cuts the sum."""
    n, T = mb["rewards"].shape
    with torch.no_grad():
        values = torch.stack([model.forward_step({"obs": mb["obs"]["obs"][:, t]}, mb["rnn_states"][:, t])["values"]
                              for t in range(T + 1)], dim=1)
    returns, advantages = torch.zeros(n, T), torch.zeros(n, T)
    for b in range(n):
        a = 0.0
        for t in reversed(range(T)):
            r = min(max(float(mb["rewards"][b, t]) * cfg.reward_scale, -cfg.reward_clip), cfg.reward_clip)
            r += cfg.gamma * float(mb["truncated"][b, t]) * float(mb["trunc_values"][b, t])
            discount = cfg.gamma * (0.0 if bool(mb["terminated"][b, t] | mb["truncated"][b, t]) else 1.0)
            delta = r + discount * float(values[b, t + 1]) - float(values[b, t])
            a = delta + discount * cfg.gae_lambda * a
            advantages[b, t], returns[b, t] = a, a + float(values[b, t])
    return returns, advantages


def reference_iteration(cfg, model, optimizer, mb, valids, seed):
    """One iteration: targets once, then per epoch a permutation of the n*T steps cut into --batch_size
    minibatches, each PPO's clipped surrogate + 0.5 value loss on normalised targets + entropy term."""
    n, T = valids.shape
    returns, advantages = gae_loop(cfg, model, mb)
    torch.manual_seed(seed)
    perms = [torch.randperm(n * T) for _ in range(cfg.ppo_epochs)]
    for perm in perms:
        for start in range(0, n * T, cfg.batch_size):
            idx = perm[start:start + cfg.batch_size]
            b, t = idx // T, idx % T
            out = model.forward_step({"obs": mb["obs"]["obs"][b, t]}, mb["rnn_states"][b, t])
            dist = make_action_distribution(model.action_space, out["action_params"])
            log_prob = dist.log_prob(mb["actions"][b, t]).unsqueeze(1)
            v = valids[b, t].unsqueeze(1)
            adv = advantages[b, t].unsqueeze(1)
            adv = (adv - adv[v].mean()) / (adv[v].std() + 1e-8)
            with torch.no_grad():
                model.returns_normalizer.update(returns[b, t].unsqueeze(1)[v])
                target_norm = model.normalize_values(returns[b, t].unsqueeze(1))
                old_norm = model.normalize_values(mb["values"][b, t].unsqueeze(1))
            policy, _ = ppo_policy_loss(log_prob, mb["log_probs"][b, t].unsqueeze(1), adv, cfg.ppo_clip_ratio, v)
            value = ppo_value_loss(out["values_normalized"].unsqueeze(1), old_norm, target_norm, cfg.ppo_clip_value, v)
            loss = policy + cfg.value_loss_coeff * value + cfg.exploration_loss_coeff * entropy_loss(
                dist.entropy().unsqueeze(1), v)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            optimizer.step()


@pytest.mark.parametrize("env", ["gym_CartPole-v1", "gym_Pendulum-v1"])
def test_an_iteration_of_transitions_equals_the_plain_reference(tmp_path, env):
    cfg, model = _setup(tmp_path, env=env, use_rnn=False, minibatch_unit="transitions", advantage_estimator="gae",
                        gae_lambda=0.9, batch_size=16, rollout=8, num_batches_per_iteration=3, ppo_epochs=2,
                        advantage_normalization="minibatch", ppo_clip_value=0.5, max_grad_norm=0.3)
    assert minibatch_unit(cfg) == "transitions"
    ref_model = copy.deepcopy(model)
    agent = APPO(cfg, model, torch.device("cpu"))
    ref_opt = torch.optim.Adam(ref_model.parameters(), lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2),
                               eps=cfg.adam_eps)
    n = APPO.trajectories_per_iteration(cfg)
    mb, valids = _batch(model, n, cfg.rollout, seed=3)
    torch.manual_seed(9)
    steps = 0
    for minibatch, v in agent.minibatches(_as_batch(mb, valids)):
        assert minibatch["rewards"].shape == (cfg.batch_size, 1) and minibatch["obs"]["obs"].shape[:2] == (16, 2)
        agent.step(minibatch, v)
        steps += 1
    assert steps == cfg.ppo_epochs * cfg.num_batches_per_iteration
    reference_iteration(cfg, ref_model, ref_opt, mb, valids, seed=9)
    for p, q in zip(model.parameters(), ref_model.parameters()):
        assert torch.allclose(p, q, atol=1e-6, rtol=1e-5)
    assert not torch.equal(next(model.parameters()), next(copy.deepcopy(_setup(tmp_path, env=env, use_rnn=False)[1])
                                                          .parameters()))  # it trained


def test_targets_come_from_whole_trajectories_not_from_the_one_step_minibatch(tmp_path):
    cfg, model = _setup(tmp_path, use_rnn=False, minibatch_unit="transitions", advantage_estimator="gae",
                        batch_size=8, rollout=8, num_batches_per_iteration=2, ppo_epochs=1)
    mb, valids = _batch(model, 2, cfg.rollout, seed=4)
    expected = iteration_targets(model, mb, valids, cfg)
    returns, advantages = gae_loop(cfg, model, mb)
    assert torch.allclose(expected.returns, returns, atol=1e-5) and torch.allclose(expected.advantages, advantages,
                                                                                    atol=1e-5)
    agent = APPO(cfg, model, torch.device("cpu"))
    seen = torch.zeros(2, cfg.rollout, dtype=torch.int64)
    for minibatch, v in agent.minibatches(_as_batch(mb, valids)):
        # which (b, t) each row is: its reward identifies it (random floats, all distinct)
        for row in range(minibatch["rewards"].shape[0]):
            b, t = (mb["rewards"] == minibatch["rewards"][row, 0]).nonzero()[0].tolist()
            seen[b, t] += 1
            assert float(minibatch["target_returns"][row, 0]) == float(expected.returns[b, t])
            assert float(minibatch["target_advantages"][row, 0]) == float(expected.advantages[b, t])
            assert bool(v[row, 0]) == bool(valids[b, t])
    assert bool((seen == 1).all())


def test_auto_is_trajectories_and_transitions_refuse_what_needs_sequences():
    assert minibatch_unit(default_cfg(env="gym_CartPole-v1")) == "trajectories"
    assert minibatch_unit(default_cfg(env="mujoco_halfcheetah")) == "trajectories"
    for flags, fragment in ((dict(use_rnn=True), "--use_rnn=True"),
                            (dict(use_rnn=False, aux_loss_future_pred_coeff=1.0), "--aux_loss_future_pred_coeff=1.0")):
        with pytest.raises(ConfigError) as e:
            default_cfg(env="gym_CartPole-v1", minibatch_unit="transitions", **flags)
        assert "\n" not in str(e.value) and fragment in str(e.value) and "allowed" in str(e.value)
    with pytest.raises(ConfigError, match="--minibatch_unit=episodes"):
        default_cfg(env="gym_CartPole-v1", minibatch_unit="episodes")
