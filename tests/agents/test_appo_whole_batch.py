"""APPO's minibatches when one minibatch is the whole batch (the default: --num_batches_per_iteration=1, with
--batch_size samples): the batch goes to the step as it is, once per epoch, instead of a shuffled copy of every
frame. Allowed because the step's loss sums over trajectories: the same batch in the shuffled order gives the
same loss and gradients up to float32 rounding (checked here on a real learning step)."""

import copy

import torch

from sfx.agents.appo import APPO, learning_step, make_optimizer
from tests.agents.test_appo_transitions import _as_batch
from tests.engine.test_learning_step import _batch, _setup


def test_a_whole_batch_minibatch_is_the_batch_itself_once_per_epoch(tmp_path):
    cfg, model = _setup(tmp_path, use_rnn=False, batch_size=32, rollout=8, num_batches_per_iteration=1, ppo_epochs=3)
    mb, valids = _batch(model, 4, cfg.rollout, seed=1)
    agent = APPO(cfg, model, torch.device("cpu"))
    got = list(agent.minibatches(_as_batch(mb, valids)))
    assert len(got) == 3
    for minibatch, v in got:
        assert minibatch["rewards"] is mb["rewards"] and minibatch["obs"]["obs"] is mb["obs"]["obs"] and v is valids
    # two minibatches per epoch: shuffled copies, as before
    cfg.batch_size = 16
    got = list(APPO(cfg, model, torch.device("cpu")).minibatches(_as_batch(mb, valids)))
    assert len(got) == 6 and all(m["rewards"].shape[0] == 2 for m, _ in got)


def test_the_step_on_the_batch_equals_the_step_on_a_shuffled_copy_up_to_rounding(tmp_path):
    cfg, model = _setup(tmp_path, use_rnn=False, batch_size=64, rollout=8)
    mb, valids = _batch(model, 8, cfg.rollout, seed=2)
    perm = torch.randperm(8, generator=torch.Generator().manual_seed(3))
    shuffled = {k: ({kk: vv[perm] for kk, vv in v.items()} if isinstance(v, dict) else v[perm]) for k, v in mb.items()}
    results = []
    for batch, vmask in ((mb, valids), (shuffled, valids[perm])):
        m = copy.deepcopy(model)
        opt = make_optimizer(cfg, m)
        stats = learning_step(m, opt, batch, vmask, cfg)
        results.append((stats, [p.detach().clone() for p in m.parameters()]))
    (stats_a, params_a), (stats_b, params_b) = results
    for key in ("loss/total", "loss/policy", "loss/value", "grad_norm"):
        assert abs(float(stats_a[key]) - float(stats_b[key])) <= 1e-5 * max(1.0, abs(float(stats_a[key]))), key
    for a, b in zip(params_a, params_b):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
