"""The ranks' meeting before any worker starts (sfx/engine/rendezvous.py), on a real TCPStore: every rank a
thread of this process, rank 0 serving the store as it does under srun (or torchrun's agent serving it)."""

import socket
import threading
from types import SimpleNamespace

import pytest

from sfx.engine.ranks import RankInfo
from sfx.engine.rendezvous import agent_hosts_store, comparable_flags, key_prefix, meet_ranks, open_store
from sfx.errors import ConfigError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cfg(**kw):
    base = dict(learning_rate=1e-3, batch_size=512, env="gym_CartPole-v1", train_dir="/x", experiment="e", seed=1,
                command_line="python -m sfx.train", explicit_args=["--seed"], distributed_timeout_sec=10.0)
    base.update(kw)
    return SimpleNamespace(**base)


def run_ranks(cfgs, port, world_size=None, timeout=10.0, environ=None, after=None):
    """meet_ranks on one thread per rank; returns per rank the meeting or the exception it raised."""
    n = len(cfgs)
    results = [None] * n

    def rank(r):
        info = RankInfo(rank=r, world_size=world_size or n, local_rank=r, local_world_size=world_size or n,
                        master_addr="127.0.0.1", master_port=port, launcher="slurm")
        try:
            meeting = meet_ranks(cfgs[r], info, timeout_sec=timeout, environ=environ or {})
            if after is not None:
                after(r, meeting)
            results[r] = meeting
        except Exception as e:  # noqa: BLE001
            results[r] = e

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


def test_ranks_with_the_same_flags_meet_and_their_own_folders_and_seeds_do_not_count():
    cfgs = [cfg(), cfg(train_dir="/x/e", experiment="rank_1", seed=1_000_004), cfg(seed=7)]
    results = run_ranks(cfgs, free_port())
    assert all(not isinstance(r, Exception) for r in results), results
    assert results[0].hosted and not results[1].hosted


def test_other_flags_are_named_on_every_rank():
    cfgs = [cfg(), cfg(learning_rate=2e-3), cfg()]
    results = run_ranks(cfgs, free_port())
    assert all(isinstance(r, ConfigError) for r in results), results
    assert str(results[0]) == ("rank 1 was started with other flags than rank 0: --learning_rate=0.002 (rank 0: 0.001)"
                               ": start every rank with the same command line")
    assert str(results[1]).startswith("rank 1 was started with other flags than rank 0: --learning_rate=0.002")
    assert str(results[2]).startswith("rank(s) 1 were started with other flags or world size than rank 0")


def test_many_differences_are_cut_to_five_and_counted():
    theirs = cfg(**{f"flag_{i}": i for i in range(8)})
    results = run_ranks([cfg(), theirs], free_port())
    assert "--flag_0=0 (rank 0: None)" in str(results[1]) and "and 3 more" in str(results[1])


def test_a_rank_that_never_comes_is_named():
    results = run_ranks([cfg(), cfg()], free_port(), world_size=3, timeout=2.0)
    assert isinstance(results[0], ConfigError) and "rank(s) 2 of 3 did not come to the rendezvous within 2 s" \
        in str(results[0])


def test_an_unreachable_rendezvous_names_the_address():
    port = free_port()
    info = RankInfo(rank=1, world_size=2, local_rank=1, local_world_size=2, master_addr="127.0.0.1",
                    master_port=port, launcher="torchrun")
    with pytest.raises(ConfigError, match=rf"rank 1 could not reach the rendezvous at 127.0.0.1:{port} within 2 s"):
        meet_ranks(cfg(), info, timeout_sec=2.0, environ={})


def test_rank_0_cannot_serve_a_port_in_use():
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        info = RankInfo(rank=0, world_size=2, local_rank=0, local_world_size=2, master_addr="127.0.0.1",
                        master_port=s.getsockname()[1], launcher="slurm")
        with pytest.raises(ConfigError, match="rank 0 cannot serve the rendezvous on port .*Set MASTER_PORT"):
            open_store(info, 2.0, host=True)


def test_a_failed_start_up_check_on_one_rank_ends_the_others_at_once():
    def after(r, meeting):
        meeting.agree("checks", "no such env" if r == 1 else None)

    results = run_ranks([cfg(), cfg(), cfg()], free_port(), after=after)
    assert [str(e) for e in results] == ["rank 1 could not start: no such env", "no such env",
                                         "rank 1 could not start: no such env"]


def test_with_torchrun_s_agent_every_rank_is_a_client_of_its_store():
    """TORCHELASTIC_USE_AGENT_STORE: the agent serves the store; keys are kept apart per restart."""
    from torch.distributed import TCPStore

    port = free_port()
    agent = TCPStore("127.0.0.1", port, None, True, wait_for_workers=False)
    env = {"TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "2"}
    assert agent_hosts_store(env) and key_prefix(env) == "sfx/attempt_2"
    results = run_ranks([cfg(), cfg()], port, environ=env)
    assert all(not isinstance(r, Exception) for r in results) and not results[0].hosted
    assert agent.check(["sfx/attempt_2/meeting/flags/rank_1"])
    # a restart meets again on the same store, under its own keys
    results = run_ranks([cfg(), cfg(learning_rate=5.0)], port, environ={**env, "TORCHELASTIC_RESTART_COUNT": "3"})
    assert isinstance(results[1], ConfigError)


def test_flags_travel_as_json_values():
    assert comparable_flags(cfg(shape=(1, 2), obj=object))["shape"] == [1, 2]
    assert "train_dir" not in comparable_flags(cfg()) and "seed" not in comparable_flags(cfg())
