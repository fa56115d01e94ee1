"""PopArt in APPO's step (sfx/agents/appo.py learning_step): every task's advantages are divided by its sigma
(Hessel et al. 2019; sfx.algo.popart.popart_advantages), its first minibatch included. A task's first
statistics are set from its first minibatch before that minibatch's loss; its advantages there must be
divided by that sigma, not by the initial sigma of 1 (which leaves a x1000 task's first policy gradient
in reward units, next to the other tasks' in units of their sigma)."""

import copy

import torch

from sfx.agents.appo import learning_step, make_optimizer
from sfx.algo.appo import APPOParams, appo_targets
from sfx.algo.normalizers import RunningMeanStd
from tests.engine.test_learning_step import _batch, _setup


def test_a_task_s_first_minibatch_divides_its_advantages_by_its_first_sigma(tmp_path):
    # --advantage_normalization=running: the advantages' running moments show the scale they were given
    cfg, model = _setup(tmp_path, num_tasks=2, popart=True, advantage_normalization="running", with_vtrace=False,
                        use_rnn=False, reward_clip=1e6)
    n, T = 4, cfg.rollout
    mb, valids = _batch(model, n, T, seed=0)
    mb["rewards"][mb["task"] == 1] *= 1000.0  # tasks 0 and 1 alternate: x1 and x1000 rewards
    with torch.no_grad():  # the advantages before any PopArt scale, with the weights the step starts from
        done = mb["terminated"] | mb["truncated"]
        out = copy.deepcopy(model).forward_trajectories(mb["obs"], mb["rnn_states"], done, T, mb["task"], None)
        raw = appo_targets(mb["rewards"], mb["terminated"], mb["truncated"], mb["trunc_values"], out.values,
                           out.bootstrap_values, None, valids, APPOParams.from_cfg(cfg), active=mb["active"],
                           normalize=False).advantages
    seen = RunningMeanStd((), clip=None)
    learning_step(model, make_optimizer(cfg, model), mb, valids, cfg, None, seen)
    sigma = model.popart.sigma().tolist()  # each task's first statistics (the step's update leaves them)
    assert sigma[1] > 100 * sigma[0]
    scaled = [float(raw[b, t]) / sigma[int(mb["task"][b])] for b in range(n) for t in range(T) if valids[b, t]]
    mean = sum(scaled) / len(scaled)
    var = sum((a - mean) ** 2 for a in scaled) / len(scaled)
    assert seen.count.item() == len(scaled)
    assert abs(seen.mean.item() - mean) < 1e-5 * max(1.0, abs(mean))
    assert abs(seen.var.item() - var) < 1e-5 * max(1.0, var)
