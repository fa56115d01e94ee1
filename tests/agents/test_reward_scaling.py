"""``--reward_scale`` and ``--reward_clip`` mean for R2D2 and SAC what they mean for APPO: each step's reward is
scaled, then clipped, before any target reads it (sfx.algo.qlearning.scale_rewards, the rule of APPO's
targets). An agent given raw rewards and the flags learns exactly as one given the rewards already scaled and
clipped, with the flags at no-op values."""

import copy

import gymnasium
import pytest
import torch

from sfx.agents.r2d2 import R2D2
from sfx.agents.sac import SAC
from sfx.algo.appo import APPOParams, appo_targets
from sfx.algo.qlearning import scale_rewards
from sfx.models.q_network import QNetwork
from sfx.models.sac_model import SACModel
from tests.agents.stubs import ListedFresh
from tests.agents.test_r2d2 import _acted_trajectories
from tests.agents.test_r2d2 import _cfg as r2d2_cfg
from tests.agents.test_sac_agent import _cfg as sac_cfg
from tests.agents.test_sac_agent import _trajectories

SCALE, CLIP = 0.05, 2.0


def test_scale_rewards_is_the_plain_rule_and_the_one_appo_s_targets_apply():
    g = torch.Generator().manual_seed(0)
    rewards = torch.randn(3, 7, generator=g) * 100
    got = scale_rewards(rewards, SCALE, CLIP)
    for b in range(3):
        for t in range(7):
            assert float(got[b, t]) == pytest.approx(max(-CLIP, min(CLIP, SCALE * float(rewards[b, t]))))
    # APPO with gamma 0 (no bootstrap, GAE): its value targets are its scaled and clipped rewards
    params = APPOParams(gamma=0.0, reward_scale=SCALE, reward_clip=CLIP, with_vtrace=False, vtrace_rho=1.0,
                        vtrace_c=1.0, gae_lambda=0.95, ppo_clip_ratio=0.1, ppo_clip_value=1.0,
                        exploration_loss="entropy", value_loss_coeff=0.5, exploration_loss_coeff=0.0, kl_loss_coeff=0.0)
    zeros, no = torch.zeros(3, 7), torch.zeros(3, 7, dtype=torch.bool)
    appo = appo_targets(rewards, no, no, zeros, zeros, torch.zeros(3), None, ~no, params)
    assert torch.equal(appo.returns, got)
    assert torch.equal(scale_rewards(rewards, 1.0, float("inf")), rewards)
    with pytest.raises(ValueError, match="clip"):
        scale_rewards(rewards, 1.0, 0.0)


def _r2d2_after_one_step(trajs, **flags):
    cfg = r2d2_cfg("/tmp", hidden_size=8, rollout=8, recurrence=8, burn_in=4, batch_size=16, **flags)
    torch.manual_seed(0)
    model = QNetwork(cfg, gymnasium.spaces.Box(-5, 5, (4,)), gymnasium.spaces.Discrete(2))
    agent = R2D2(cfg, model, torch.device("cpu"))
    store = agent.sample_source(ListedFresh(copy.deepcopy(trajs)))
    for _ in trajs:
        store.next_batch(0)
    priorities = store.sampler.get(torch.arange(store.size))
    stats = agent.step(*store.sample(2, 0)).stats
    return stats, priorities, model


def test_r2d2_trains_on_the_scaled_and_clipped_rewards():
    model = QNetwork(r2d2_cfg("/tmp", hidden_size=8), gymnasium.spaces.Box(-5, 5, (4,)), gymnasium.spaces.Discrete(2))
    trajs = _acted_trajectories(model, steps=24, T=8, actors=2)
    g = torch.Generator().manual_seed(1)
    for t in trajs:
        t["rewards"] = torch.randn(t["rewards"].shape, generator=g) * 100
    prescaled = copy.deepcopy(trajs)
    for t in prescaled:
        t["rewards"] = scale_rewards(t["rewards"], SCALE, CLIP)
    flagged, flagged_priorities, flagged_model = _r2d2_after_one_step(trajs, reward_scale=SCALE, reward_clip=CLIP)
    plain, plain_priorities, plain_model = _r2d2_after_one_step(prescaled, reward_scale=1.0, reward_clip=1e6)
    assert torch.equal(flagged_priorities, plain_priorities)  # the acting side's initial priorities
    for key in ("loss/td", "td_abs_mean", "td_abs_max", "q_mean", "priority_new_mean", "grad_norm"):
        assert flagged[key] == plain[key], key
    for a, b in zip(flagged_model.parameters(), plain_model.parameters()):
        assert torch.equal(a, b)


def _sac_after_two_steps(data, **flags):
    cfg = sac_cfg("/tmp", batch_size=32, learning_starts=0, seed=5, n_step=3, **flags)
    torch.manual_seed(0)
    model = SACModel(cfg, gymnasium.spaces.Box(-1.0, 1.0, (3,)), gymnasium.spaces.Box(-1.0, 1.0, (2,)))
    agent = SAC(cfg, model, torch.device("cpu"))
    store = agent.sample_source(ListedFresh([data]))
    mbs = list(agent.minibatches(store.next_batch(0)))
    return [agent.step(*mb) for mb in mbs[:2]], mbs


def test_sac_trains_on_the_scaled_and_clipped_rewards():
    data = _trajectories(4, 16)
    data["obs"]["obs"] = data["obs"]["obs"] / 1000.0
    data["final_obs"]["obs"] = data["final_obs"]["obs"] / 1000.0
    data["rewards"] = torch.randn(4, 16, generator=torch.Generator().manual_seed(2)) * 100
    prescaled = copy.deepcopy(data)
    prescaled["rewards"] = scale_rewards(data["rewards"], SCALE, CLIP)
    flagged, flagged_mbs = _sac_after_two_steps(data, reward_scale=SCALE, reward_clip=CLIP)
    plain, plain_mbs = _sac_after_two_steps(prescaled, reward_scale=1.0, reward_clip=1e6)
    # the n-step windows summed the scaled and clipped rewards (the same draws: the same seed)
    assert torch.equal(flagged_mbs[0][0]["rewards"], plain_mbs[0][0]["rewards"])
    for one, other in zip(flagged, plain):
        for key in ("target_q_mean", "loss/critic", "loss/actor", "q1_mean", "alpha"):
            assert one[key] == other[key], key


def test_r2d2_and_sac_clip_no_reward_by_default_whatever_the_family_sets_for_appo():
    from sfx.registries import default_cfg

    # R2D2 rescales values instead of clipping rewards; SAC's paper and SB3 do not clip: Atari's 1 and gym's 10
    # are APPO's. A command line still sets it, and a family's --reward_scale (doom's 0.01) applies to all
    assert default_cfg(env="atari_pong", algo="APPO").reward_clip == 1.0
    assert default_cfg(env="atari_pong", algo="R2D2").reward_clip == 1e6
    assert default_cfg(env="gym_Pendulum-v1", algo="SAC").reward_clip == 1e6
    assert default_cfg(env="atari_pong", algo="R2D2", reward_clip=1.0).reward_clip == 1.0
    assert default_cfg(env="doom_basic", algo="R2D2").reward_scale == 0.01
