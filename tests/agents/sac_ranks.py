"""A rank of the SAC data-parallel test (module level, so that a spawned process can import it)."""

from __future__ import annotations

import gymnasium
import torch
import torch.distributed as dist

from sfx.agents.base import NonFiniteBatch

SPACES = (gymnasium.spaces.Box(-1.0, 1.0, (3,)), gymnasium.spaces.Box(-2.0, 2.0, (1,)))


def sac_setup(tmp: str, rank: int, group=None):
    """One rank's cfg, agent and store; the same initial weights on every rank (the learner broadcasts them)."""
    from sfx.agents.sac import SAC
    from sfx.registries import default_cfg
    from sfx.models.sac_model import SACModel
    from tests.agents.stubs import ListedFresh

    cfg = default_cfg(env="gym_Pendulum-v1", algo="SAC", experiment="sac", train_dir=tmp, device="cpu", seed=3 + rank,
                      batch_size=16, hidden_size=16, learning_starts=0, replay_ratio=8.0)
    torch.manual_seed(0)
    model = SACModel(cfg, *SPACES)
    agent = SAC(cfg, model, torch.device("cpu"), group)
    store = agent.sample_source(ListedFresh([]))
    return cfg, agent, store


def rank_data(rank: int, n: int):
    """``n`` 8-step trajectories of 3-D observations and 1-D actions, different on each rank."""
    from tests.agents.test_sac_agent import _trajectories

    data = _trajectories(n, 8, obs_dim=3, act_dim=1, start=100_000 * rank)
    data["obs"]["obs"] = torch.sin(data["obs"]["obs"] / 7.0)
    data["final_obs"]["obs"] = torch.sin(data["final_obs"]["obs"] / 7.0)
    data["rewards"] = torch.cos(data["rewards"] / 5.0)
    return data


def train_once(agent, store, data, nan_step: int | None = None) -> tuple[int, list[int]]:
    """Insert ``data`` and take the iteration's gradient steps -> (steps taken, steps skipped as non-finite)."""
    store.fresh.batches = [data]
    batch = store.next_batch(0)
    steps, skipped = 0, []
    for i, (mb, valids) in enumerate(agent.minibatches(batch)):
        if nan_step == i:
            mb = dict(mb, rewards=mb["rewards"].clone())
            mb["rewards"][0] = float("nan")
        try:
            agent.step(mb, valids)
        except NonFiniteBatch:
            skipped.append(i)
        steps += 1
    return steps, skipped


def rank_main(rank: int, world: int, init_file: str, out_dir: str, trajectories: list[int],
              nan_at: tuple[int, int] | None = None) -> None:
    from sfx.engine.data_parallel import GradientGroup

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        _, agent, store = sac_setup(out_dir, rank, GradientGroup())
        nan_step = nan_at[1] if nan_at is not None and nan_at[0] == rank else None
        steps, skipped = train_once(agent, store, rank_data(rank, trajectories[rank]), nan_step)
        torch.save({"steps": steps, "skipped": skipped, "credit": store.credit, "model": agent.model.state_dict(),
                    "target": agent.target_critic.state_dict(), "log_alpha": agent.log_alpha.detach().clone(),
                    "updates_per_step": store.stats()["replay/updates_per_step"]}, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()
