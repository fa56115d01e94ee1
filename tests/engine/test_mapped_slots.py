"""--inference_gather=device (sfx/engine/mapped_slots.py): slot memory registered with CUDA and read by the GPU in
place. The CPU checks the flag and the fallback; the rest needs CUDA (run on a lent GPU machine)."""

import logging

import pytest
import torch

from sfx.cfg import ConfigError
from sfx.registries import default_cfg
from sfx.engine import run_training
from sfx.engine.mapped_slots import MappedSlots

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="mapped host memory needs CUDA")


def test_flag_default_choices_and_no_effect_without_cuda():
    assert default_cfg("gym_CartPole-v1").inference_gather == "host"
    assert default_cfg("gym_CartPole-v1", inference_gather="device").inference_gather == "device"
    with pytest.raises(ConfigError, match="--inference_gather: invalid choice: 'gpu'"):
        from sfx.registries import parse_args

        parse_args(["--env=gym_CartPole-v1", "--inference_gather=gpu"], resume=False)
    buf = torch.zeros(4, 3, 2).share_memory_()
    assert MappedSlots.create(torch.device("cpu"), {"x": buf}) is None


def _slots(dtype, shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.uint8:
        return torch.randint(0, 256, shape, generator=g, dtype=dtype).share_memory_()
    return torch.randn(shape, generator=g).to(dtype).share_memory_()


@cuda
def test_rows_read_on_the_device_equal_the_hosts_and_follow_later_writes():
    dev = torch.device("cuda")
    obs = _slots(torch.uint8, (12, 5, 3, 8, 16))   # [slots, T + 1, C, H, W]
    rnn = _slots(torch.float32, (12, 5, 2, 32))
    mapped = MappedSlots.create(dev, {"obs.obs": obs, "rnn_states": rnn})
    assert mapped is not None and "obs.obs" in mapped
    try:
        at = torch.tensor([0, 59, 7, 31, 7])
        got = mapped.rows("obs.obs", at)
        assert got.device.type == "cuda" and got.dtype == torch.uint8
        assert torch.equal(got.cpu(), obs.view(-1, 3, 8, 16)[at])
        assert torch.equal(mapped.rows("rnn_states", at.cuda()).cpu(), rnn.view(-1, 2, 32)[at])
        # a rollout worker's later write (here: this process's) is what the next gather reads
        obs[1, 2] = 7
        rnn.view(-1, 2, 32)[59] = -1.5
        assert bool((mapped.rows("obs.obs", torch.tensor([7])) == 7).all())
        assert bool((mapped.rows("rnn_states", torch.tensor([59])) == -1.5).all())
    finally:
        mapped.close()


@cuda
def test_a_dtype_the_interface_cannot_name_falls_back_and_cuda_still_works(caplog):
    caplog.set_level(logging.WARNING)
    bad = _slots(torch.bfloat16, (4, 3, 8))
    assert MappedSlots.create(torch.device("cuda"), {"x": bad}) is None
    assert "gathering on the host instead" in caplog.text
    assert float((torch.ones(3, device="cuda") * 2).sum()) == 6.0  # no stale CUDA error left behind
    # after a fallback, registering other slot memory works
    ok = MappedSlots.create(torch.device("cuda"), {"x": bad.float().share_memory_()})
    assert ok is not None
    ok.close()


@cuda
@pytest.mark.parametrize("inference", ["workers", "learner"])
def test_training_with_device_gather_runs_on_cuda(tmp_path, inference):
    cfg = default_cfg(env="gym_CartPole-v1", experiment="t", train_dir=str(tmp_path), num_workers=2,
                      num_envs_per_worker=4, worker_num_splits=2, rollout=16, recurrence=16, batch_size=128,
                      hidden_size=32, use_rnn=True, device="gpu", seed=1, train_for_env_steps=6000,
                      inference_gather="device", inference=inference, report_every_sec=1.0, save_every_sec=1000)
    result = run_training(cfg)
    assert result["status"] == "done"
    log_text = (tmp_path / "t" / "sf_log.txt").read_text()
    assert "gathering on the host instead" not in log_text, log_text
