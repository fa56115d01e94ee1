"""bench/sb3_ppo_update.py's sfx half: the zoo line's flags (runs/zoo_ppo_halfcheetah.py) give one PPO iteration as a
plain loop written from the papers computes it (GAE, Schulman et al. 2016; the clipped surrogate, Schulman et al.
2017; with Stable-Baselines3's choices, which its docs state: per-minibatch advantage normalisation, the value
loss's mean squared error times vf_coef, the entropy bonus, one gradient-norm clip over every parameter, Adam with
eps 1e-5). The SB3 half needs bench/sb3_venv, which CI has not: this test is what CI can check of the bench."""

from __future__ import annotations

import math
import shlex

import numpy as np
import pytest
import torch
from torch import nn

from bench import sb3_ppo_update as bench
from runs.zoo_ppo_halfcheetah import CMD

GAMMA, LAMBDA, CLIP, VF_COEF, ENT_COEF, MAX_GRAD_NORM = 0.98, 0.92, 0.1, 0.58096, 0.000401762, 0.8
LR, ADAM_EPS, BATCH, EPOCHS, HIDDEN = 2.0633e-05, 1e-5, 64, 20, 256


class PlainPolicy(nn.Module):
    """Two separate 2 x 256 ReLU networks, a linear mean and value, a state-independent log-std."""

    def __init__(self, obs_dim: int, act_dim: int) -> None:
        super().__init__()
        self.pi = nn.Sequential(nn.Linear(obs_dim, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU())
        self.vf = nn.Sequential(nn.Linear(obs_dim, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU())
        self.mean, self.value = nn.Linear(HIDDEN, act_dim), nn.Linear(HIDDEN, 1)
        self.log_std = nn.Parameter(torch.full((act_dim,), -2.0))

    def sb3_names(self) -> dict[str, torch.Tensor]:
        p = self.state_dict()
        names = {"log_std": "log_std", "action_net.weight": "mean.weight", "action_net.bias": "mean.bias",
                 "value_net.weight": "value.weight", "value_net.bias": "value.bias"}
        for net, ours in (("policy_net", "pi"), ("value_net", "vf")):
            for layer in ("0", "2"):
                for kind in ("weight", "bias"):
                    names[f"mlp_extractor.{net}.{layer}.{kind}"] = f"{ours}.{layer}.{kind}"
        return {theirs: p[ours] for theirs, ours in names.items()}

    def log_prob_entropy_value(self, obs: torch.Tensor, actions: torch.Tensor):
        mean, log_std = self.mean(self.pi(obs)), self.log_std.expand(obs.shape[0], -1)
        std = log_std.exp()
        log_prob = (-((actions - mean) ** 2) / (2 * std ** 2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        entropy = (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum(-1)
        return log_prob, entropy, self.value(self.vf(obs)).squeeze(-1)


def rollout(policy: PlainPolicy, T: int, truncate_at: tuple[int, ...], seed: int) -> dict:
    """A rollout in the arrays SB3's half saves: made-up observations and rewards, actions from the policy."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(T + 1, 17, generator=g)
    final_obs = torch.randn(T, 17, generator=g)
    truncated = np.zeros(T, bool)
    truncated[list(truncate_at)] = True
    with torch.no_grad():
        mean = policy.mean(policy.pi(obs[:T]))
        actions = mean + policy.log_std.exp() * torch.randn(T, 6, generator=g)
        log_probs, _, values = policy.log_prob_entropy_value(obs[:T], actions)
    d = {"before/" + k: v.clone().numpy() for k, v in policy.sb3_names().items()}
    d.update({"rollout/observations": obs[:T].numpy(), "rollout/next_obs": obs[T].numpy(),
              "rollout/actions": actions.numpy(), "rollout/log_probs": log_probs.numpy(),
              "rollout/values": values.numpy(), "raw_rewards": torch.randn(T, generator=g).numpy(),
              "truncated": truncated, "terminated": np.zeros(T, bool),
              "final_obs": np.where(truncated[:, None], final_obs.numpy(), 0.0).astype(np.float32),
              "perms": np.stack([torch.randperm(T, generator=g).numpy() for _ in range(EPOCHS)]),
              "batch_size": np.array(BATCH), "action_low": -np.ones(6, np.float32),
              "action_high": np.ones(6, np.float32)})
    return d


def plain_iteration(policy: PlainPolicy, d: dict) -> tuple[dict[str, torch.Tensor], np.ndarray, np.ndarray]:
    """One PPO iteration as a loop: GAE backwards over the rollout (a time-limit end adds gamma V(final obs) to its
    reward and cuts the recursion), then per epoch and minibatch the clipped loss and one Adam step."""
    obs = torch.as_tensor(d["rollout/observations"])
    actions = torch.as_tensor(d["rollout/actions"])
    old_log_probs = torch.as_tensor(d["rollout/log_probs"])
    T = len(obs)
    with torch.no_grad():
        values = policy.value(policy.vf(obs)).squeeze(-1).tolist()
        next_value = float(policy.value(policy.vf(torch.as_tensor(d["rollout/next_obs"])[None])))
        final_values = policy.value(policy.vf(torch.as_tensor(d["final_obs"]))).squeeze(-1).tolist()
    advantages, last = [0.0] * T, 0.0
    for t in reversed(range(T)):
        reward = float(d["raw_rewards"][t])
        if d["truncated"][t]:
            reward += GAMMA * final_values[t]
            not_done, following = 0.0, 0.0
        else:
            not_done, following = 1.0, (values[t + 1] if t + 1 < T else next_value)
        delta = reward + GAMMA * following * not_done - values[t]
        last = delta + GAMMA * LAMBDA * not_done * last
        advantages[t] = last
    advantages = torch.tensor(advantages)
    returns = advantages + torch.tensor(values)
    optimizer = torch.optim.Adam(policy.parameters(), lr=LR, eps=ADAM_EPS)
    for perm in d["perms"]:
        for start in range(0, T, BATCH):
            idx = torch.as_tensor(perm[start:start + BATCH]).long()
            log_prob, entropy, value = policy.log_prob_entropy_value(obs[idx], actions[idx])
            adv = advantages[idx]
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            ratio = torch.exp(log_prob - old_log_probs[idx])
            policy_loss = -torch.min(adv * ratio, adv * ratio.clamp(1 - CLIP, 1 + CLIP)).mean()
            value_loss = ((returns[idx] - value) ** 2).mean()
            loss = policy_loss + VF_COEF * value_loss - ENT_COEF * entropy.mean()
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(policy.parameters(), MAX_GRAD_NORM)
            optimizer.step()
    return {k: v.detach().clone() for k, v in policy.sb3_names().items()}, advantages.numpy(), returns.numpy()


def zoo_flags() -> list[str]:
    return shlex.split(CMD)[3:] + ["--normalize_input=False", "--normalize_returns=False", "--device=cpu"]


@pytest.mark.parametrize("truncate_at", [(), (37, 101)])
def test_the_zoo_lines_update_is_the_papers_loop_to_float_rounding(truncate_at):
    torch.manual_seed(0)
    policy = PlainPolicy(17, 6)
    d = rollout(policy, T=128, truncate_at=truncate_at, seed=1)
    after, advantages, returns = plain_iteration(policy, d)
    d.update({"rollout/advantages": advantages, "rollout/returns": returns,
              **{"after/" + k: v.numpy() for k, v in after.items()}})
    ours, checks = bench.sfx_iteration(d, zoo_flags())
    assert checks["steps"] == EPOCHS * 2
    assert checks["values"] < 1e-5 and checks["advantages"] < 1e-4 and checks["returns"] < 1e-4
    rows = bench.compare(d, ours)
    assert all(change > 0 for _, change, _, _, _ in rows)  # every parameter moved: nothing compared was idle
    # float32 rounding over 40 Adam steps of a 256-unit network: ~1e-5 of each parameter's change
    worst = max(rel for *_, rel in rows)
    assert worst < 1e-3, rows


def test_a_flag_that_differs_from_the_loop_is_caught():
    # the translation the bench exists to check: sfx's value loss is half the squared error, so the zoo's vf_coef
    # is --value_loss_coeff=1.16192; the zoo's own number on sfx's side halves the value gradients (and, through the
    # one gradient-norm clip over both networks, moves the actor too)
    torch.manual_seed(0)
    policy = PlainPolicy(17, 6)
    d = rollout(policy, T=128, truncate_at=(), seed=1)
    after, advantages, returns = plain_iteration(policy, d)
    d.update({"rollout/advantages": advantages, "rollout/returns": returns,
              **{"after/" + k: v.numpy() for k, v in after.items()}})
    ours, _ = bench.sfx_iteration(d, zoo_flags() + ["--value_loss_coeff=0.58096"])
    rel = {name: r for name, *_, r in bench.compare(d, ours)}
    assert rel["value_net.weight"] > 1e-2 and max(rel.values()) > 10 * 1e-3, rel  # ten times the bench's tolerance


def test_epochs_or_minibatches_that_differ_from_the_rollouts_are_refused():
    torch.manual_seed(0)
    d = rollout(PlainPolicy(17, 6), T=128, truncate_at=(), seed=1)
    with pytest.raises(SystemExit, match="10 epochs of minibatches of 64, SB3 20 of 64"):
        bench.sfx_iteration(d, zoo_flags() + ["--ppo_epochs=10"])


def test_bad_arguments_are_one_line_each(capsys):
    for argv, needle in ((["--steps=1"], "--steps=1: expected an integer >= 2"),
                         (["--tolerance=0"], "--tolerance=0.0: expected a number > 0")):
        with pytest.raises(SystemExit):
            bench.parse_args(argv)
        assert needle in capsys.readouterr().err
