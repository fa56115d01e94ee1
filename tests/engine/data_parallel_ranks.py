"""A rank of the data-parallel learning-step test (module-level, so a spawned process can import it)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from sfx.algo.normalizers import RunningMeanStd
from sfx.engine.data_parallel import GradientGroup
from sfx.agents import NonFiniteBatch
from sfx.agents.appo import learning_step, make_optimizer, running_advantage_normalization
from tests.engine.test_learning_step import _batch, _setup


def rank_main(rank: int, world: int, init_file: str, out_dir: str, overrides: dict, n: int, T: int,
              steps: int, nan_at: tuple[int, int] | None = None, nan_key: str = "rewards") -> None:
    """``nan_at=(rank, step)``: that rank's ``nan_key`` (rewards: the targets; log_probs with GAE: only the
    loss) has a NaN row at that step; every rank records the steps it skipped in ``skipped{rank}.txt``."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        cfg, model = _setup(out_dir, **overrides)
        optimizer = make_optimizer(cfg, model)
        # as the Learner keeps them (--advantage_normalization=auto without --popart: running)
        advantage_stats = RunningMeanStd((), clip=None) if running_advantage_normalization(cfg) else None
        group = GradientGroup()
        per_rank = n // world
        rows = slice(rank * per_rank, (rank + 1) * per_rank)
        skipped: list[str] = []
        for step in range(steps):
            mb, valids = _batch(model, n, T, seed=step)
            mine = {k: ({kk: vv[rows] for kk, vv in v.items()} if isinstance(v, dict) else v[rows])
                    for k, v in mb.items()}
            if nan_at == (rank, step):
                mine[nan_key] = mine[nan_key].clone()
                mine[nan_key][0] = float("nan")
            try:
                learning_step(model, optimizer, mine, valids[rows], cfg, group, advantage_stats)
            except NonFiniteBatch as e:
                skipped.append(f"{step} {e.where}")
        with open(f"{out_dir}/skipped{rank}.txt", "w") as f:
            f.write("\n".join(skipped))
        state = model.state_dict()
        if advantage_stats is not None:
            state.update({f"advantage_stats.{k}": v for k, v in advantage_stats.state_dict().items()})
        torch.save(state, f"{out_dir}/rank{rank}.pt")
    finally:
        GradientGroup().close()  # waits for the other rank before tearing the group down


def rank_state(rank: int, world: int, init_file: str, out_dir: str) -> None:
    """Different seeds per rank; broadcast makes them equal; a drift on one rank is seen by every rank;
    the observation normalizer's update covers every rank's rows."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        torch.manual_seed(100 + rank)
        cfg, model = _setup(out_dir, use_rnn=False, normalize_input=True)
        torch.manual_seed(100 + rank)
        for p in model.parameters():
            torch.nn.init.normal_(p)
        group = GradientGroup()
        results = {"before": group.weights_match(model)}
        group.broadcast_state(model)
        results["after_broadcast"] = group.weights_match(model)
        rows = torch.randn(10 + 7 * rank, *model.obs_space.shape, generator=torch.Generator().manual_seed(rank)) * 3 + rank
        model.update_obs_normalizer({"obs": rows}, reduce=group.sum)
        if rank == 1:
            with torch.no_grad():
                next(model.parameters()).view(-1)[0] += 1e-6
        results["after_drift"] = group.weights_match(model)
        torch.save({"results": results, "state": model.state_dict()}, f"{out_dir}/state{rank}.pt")
    finally:
        GradientGroup().close()  # waits for the other rank before tearing the group down


def rank_kl_adaptive(rank: int, world: int, init_file: str, out_dir: str, overrides: dict, n: int, T: int,
                     steps: int) -> None:
    """APPO with --lr_schedule=kl_adaptive_minibatch on each rank's half of every minibatch: records this rank's
    own KL per step, the learning rate after it, and the final weights."""
    from sfx.agents.appo import APPO

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        cfg, model = _setup(out_dir, **overrides)
        agent = APPO(cfg, model, torch.device("cpu"), GradientGroup())
        per_rank = n // world
        rows = slice(rank * per_rank, (rank + 1) * per_rank)
        kls, rates = [], []
        for step in range(steps):
            mb, valids = _batch(model, n, T, seed=step)
            mine = {k: ({kk: vv[rows] for kk, vv in v.items()} if isinstance(v, dict) else v[rows])
                    for k, v in mb.items()}
            kls.append(agent.step(mine, valids[rows])["kl"])
            rates.append(agent.current_lr())
        torch.save({"kls": kls, "rates": rates, "model": model.state_dict()}, f"{out_dir}/kl_rank{rank}.pt")
    finally:
        GradientGroup().close()
