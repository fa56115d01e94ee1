"""Data-parallel learners (issue 15's gradient step): two ranks with different halves of a batch,
each with its own valid samples, make the update one learner makes on the whole batch, and end with
bitwise-equal weights. Real process groups: two spawned processes, gloo over a file rendezvous."""

import pytest
import torch
import torch.multiprocessing as mp

from sfx.algo.normalizers import RunningMeanStd
from sfx.agents.appo import learning_step, make_optimizer, running_advantage_normalization
from sfx.algo.schedules import kl_adaptive_lr
from tests.engine.data_parallel_ranks import rank_kl_adaptive, rank_main
from tests.engine.test_learning_step import _batch, _setup

N, T, STEPS = 8, 8, 3


@pytest.mark.parametrize("overrides", [
    dict(use_rnn=True, with_vtrace=True),
    dict(use_rnn=False, with_vtrace=False, exploration_loss="entropy", advantage_normalization="running"),
    # PopArt: the per-task statistics move by every rank's targets, the head rescaled alike everywhere
    dict(use_rnn=False, with_vtrace=True, popart=True, popart_beta=0.2, num_tasks=3),
], ids=["gru_vtrace", "mlp_gae", "popart_3_tasks"])
def test_two_ranks_make_the_update_of_one_learner_on_the_whole_batch(tmp_path, overrides):
    overrides = dict(overrides, rollout=T, recurrence=4, batch_size=N * T)
    mp.spawn(rank_main, args=(2, str(tmp_path / "rendezvous"), str(tmp_path), overrides, N, T, STEPS), nprocs=2,
             join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]

    cfg, model = _setup(str(tmp_path), **overrides)
    # the returns normalizer's (or PopArt's) statistics are reduced over ranks too
    assert cfg.normalize_returns and (model.returns_normalizer is not None or model.popart is not None)
    optimizer = make_optimizer(cfg, model)
    # the running advantage statistics (the default) hold every rank's advantages, on every rank
    running = running_advantage_normalization(cfg)
    advantage_stats = RunningMeanStd((), clip=None) if running else None
    before = {k: v.clone() for k, v in model.state_dict().items()}
    for step in range(STEPS):
        mb, valids = _batch(model, N, T, seed=step)
        halves = valids[: N // 2].sum(), valids[N // 2:].sum()
        assert halves[0] != halves[1] or step > 0  # the ranks' shares of valid samples differ
        learning_step(model, optimizer, mb, valids, cfg, None, advantage_stats)

    state = model.state_dict()
    if advantage_stats is not None:
        state.update({f"advantage_stats.{k}": v for k, v in advantage_stats.state_dict().items()})
    assert running == (not cfg.popart) == ("advantage_stats.count" in ranks[0])
    if model.popart is not None:  # every task's statistics moved (both halves hold every task)
        assert bool((model.popart.mu != 0).all()) and torch.equal(ranks[0]["popart.mu"], ranks[1]["popart.mu"])
    for name, value in state.items():
        assert torch.equal(ranks[0][name], ranks[1][name]), f"{name} differs between the ranks"
        torch.testing.assert_close(ranks[0][name], value, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("nan_key, with_vtrace, where", [
    ("rewards", True, "value targets / advantages"),
    # with GAE a NaN behaviour log-prob leaves the targets finite and makes only that rank's loss NaN
    ("log_probs", False, "loss"),
], ids=["targets", "loss_on_one_rank_only"])
def test_a_non_finite_minibatch_on_one_rank_is_skipped_on_every_rank(tmp_path, nan_key, with_vtrace, where):
    overrides = dict(use_rnn=False, rollout=T, recurrence=4, batch_size=N * T, with_vtrace=with_vtrace)
    mp.spawn(rank_main, args=(2, str(tmp_path / "rendezvous"), str(tmp_path), overrides, N, T, STEPS, (1, 1),
                              nan_key), nprocs=2, join=True)
    skipped = [(tmp_path / f"skipped{r}.txt").read_text().splitlines() for r in range(2)]
    assert skipped == [[f"1 {where}"]] * 2  # both ranks, the same step, nobody hung
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    for name in ranks[0]:
        assert torch.equal(ranks[0][name], ranks[1][name]), f"{name} differs between the ranks"


def test_broadcast_checksum_and_observation_statistics_across_ranks(tmp_path):
    from tests.engine.data_parallel_ranks import rank_state

    mp.spawn(rank_state, args=(2, str(tmp_path / "rendezvous"), str(tmp_path)), nprocs=2, join=True)
    out = [torch.load(tmp_path / f"state{r}.pt") for r in range(2)]
    for r in range(2):
        assert out[r]["results"] == {"before": False, "after_broadcast": True, "after_drift": False}
    # the normalizer saw both ranks' rows: its statistics are those of the concatenation, on both ranks
    cfg, model = _setup(str(tmp_path), use_rnn=False, normalize_input=True)
    rows = [torch.randn(10 + 7 * r, *model.obs_space.shape, generator=torch.Generator().manual_seed(r)) * 3 + r
            for r in range(2)]
    model.update_obs_normalizer({"obs": torch.cat(rows)})
    stats = {k: v for k, v in model.state_dict().items() if "normalizer" in k and ("mean" in k or "var" in k)}
    assert stats, "no observation normalizer statistics in the model"
    for name, value in stats.items():
        for r in range(2):
            torch.testing.assert_close(out[r]["state"][name], value, rtol=1e-9, atol=1e-9)


def test_a_kl_adaptive_learning_rate_moves_alike_on_every_rank_by_the_ranks_mean_kl(tmp_path):
    # the ranks' own KLs are 0.058-0.098 here: with the band's top at 0.07 one rank alone would lower its rate at a
    # step where the mean keeps it (and the reverse), so only the ranks' mean gives both the same rates
    overrides = dict(rollout=T, recurrence=4, batch_size=N * T, use_rnn=False, learning_rate=1e-3,
                     lr_schedule="kl_adaptive_minibatch", lr_schedule_kl_threshold=0.035)
    mp.spawn(rank_kl_adaptive, args=(2, str(tmp_path / "rendezvous"), str(tmp_path), overrides, N, T, 4), nprocs=2,
             join=True)
    ranks = [torch.load(tmp_path / f"kl_rank{r}.pt") for r in range(2)]
    assert ranks[0]["kls"] != ranks[1]["kls"]  # each rank's own samples: its own KL
    assert ranks[0]["rates"] == ranks[1]["rates"]
    lr, expected = 1e-3, []
    for kl0, kl1 in zip(ranks[0]["kls"], ranks[1]["kls"]):
        lr = kl_adaptive_lr(lr, (kl0 + kl1) / 2, 0.035, 1e-6, 1e-2)
        expected.append(lr)
    assert ranks[0]["rates"] == pytest.approx(expected, rel=1e-9)
    assert len(set(expected)) > 1  # it moved
    assert any((kl0 > 0.07) != (kl1 > 0.07) for kl0, kl1 in zip(ranks[0]["kls"], ranks[1]["kls"]))
    for name, value in ranks[0]["model"].items():
        assert torch.equal(value, ranks[1]["model"][name]), f"{name} differs between the ranks"
