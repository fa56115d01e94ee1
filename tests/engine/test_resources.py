"""Startup checks: shared memory needed vs /dev/shm, the open-file limit, memory per process."""

import os
import resource
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from sfx.agents.appo import APPOActingRule
from sfx.cfg import ConfigError
from sfx.registries import default_cfg
from sfx.engine.buffers import allocate_agent_buffers, allocate_trajectory_buffers, tree_map
from sfx.engine.resources import check_shared_memory, process_rss_mb, trajectory_buffer_bytes


APPO_FIELDS = APPOActingRule(gym.spaces.Discrete(7)).fields  # log-probs, 7 logits, values, truncation values


def _allocated_bytes(tb, ab) -> int:
    sizes = []
    tree_map(lambda t: sizes.append(t.numel() * t.element_size()), tb.tensors())
    tree_map(lambda t: sizes.append(t.numel() * t.element_size()),
             {"o": ab.final_obs, "r": ab.final_rnn, "m": ab.memory})
    return sum(sizes)


@pytest.mark.parametrize("final_obs", [False, True])
def test_the_estimate_matches_what_is_allocated(final_obs):
    """Exactly the bytes allocated: the fixed fields, the agent's fields, the final observations where the
    acting rule keeps them (the task per slot: 8 bytes, counted)."""
    spec = {"obs": ((3, 72, 128), np.dtype(np.uint8)), "measurements": ((7,), np.dtype(np.float32))}
    tb = allocate_trajectory_buffers(6, 32, spec, rnn_size=512, action_dim=1, agent_fields=APPO_FIELDS,
                                     final_obs=final_obs)
    ab = allocate_agent_buffers(10, spec, rnn_size=512)
    assert set(APPO_FIELDS) <= set(tb.tensors()) and ("final_obs" in tb.tensors()) == final_obs
    estimate = trajectory_buffer_bytes(spec, 32, 512, 1, APPO_FIELDS, num_slots=6, num_policies=1,
                                       num_agents_total=10, final_obs=final_obs)
    assert estimate == _allocated_bytes(tb, ab)


def test_the_estimate_counts_a_memory_core_per_slot_and_per_agent():
    spec = {"obs": ((3, 72, 128), np.dtype(np.uint8))}
    memory = (512, 1024)  # Transformer-XL, mem_len 512, 2 layers of 512
    tb = allocate_trajectory_buffers(6, 32, spec, rnn_size=2, action_dim=1, agent_fields=APPO_FIELDS,
                                     memory_shape=memory)
    ab = allocate_agent_buffers(10, spec, rnn_size=2, memory_shape=memory)
    assert tuple(tb.memory.shape) == (6, *memory) and tuple(ab.memory.shape) == (10, *memory)
    estimate = trajectory_buffer_bytes(spec, 32, 2, 1, APPO_FIELDS, num_slots=6, num_policies=1, num_agents_total=10,
                                       memory_floats=memory[0] * memory[1])
    assert estimate == _allocated_bytes(tb, ab)


def test_too_little_shared_memory_is_a_config_error_with_advice():
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm here")
    with pytest.raises(ConfigError, match=r"need [\d,]+ MiB of shared memory but /dev/shm has [\d,]+ MiB free.*"
                                          r"--shm-size.*--num_envs_per_worker"):
        check_shared_memory(10 ** 15)
    check_shared_memory(1024)  # a small need passes


def test_a_run_too_big_for_shared_memory_fails_before_saving_its_cfg(tmp_path):
    cfg = default_cfg("gym_CartPole-v1", experiment="big", train_dir=str(tmp_path), num_workers=1,
                      num_envs_per_worker=2, rollout=32, batch_size=32 * 4_000_000, device="cpu")
    from sfx.engine import run_training

    with pytest.raises(ConfigError, match="shared memory"):
        run_training(cfg)
    assert not (tmp_path / "big" / "cfg.json").exists()


def test_open_file_limit_is_raised_in_a_child_process():
    code = ("import resource; from sfx.engine.resources import ensure_open_file_limit; "
            "s, h = resource.getrlimit(resource.RLIMIT_NOFILE); resource.setrlimit(resource.RLIMIT_NOFILE, (256, h)); "
            "print(ensure_open_file_limit(100), resource.getrlimit(resource.RLIMIT_NOFILE)[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    returned, now = map(int, out.stdout.split())
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    expected = 1024 + 16 * 100 if hard == resource.RLIM_INFINITY else min(1024 + 16 * 100, hard)
    assert returned == now == expected


def test_rss_of_live_processes_only():
    rss = process_rss_mb({"me": os.getpid(), "gone": 2 ** 22 + 12345})
    assert set(rss) == {"me"} and rss["me"] > 10
