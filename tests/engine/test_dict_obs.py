"""Dict observations (an image, a measurements vector and instruction tokens) through the whole
engine: buffers, policy workers, learner recomputation, truncation bootstrap, learning."""

import gymnasium
import numpy as np
import pytest
import torch

from sfx.registries import default_cfg
import sfx.agents.appo.learning as learner_module
from sfx.engine import run_training
from sfx.envs import register_env
from sfx.envs.registry import unregister_env_family
from sfx.models import create_actor_critic

EPISODE_LEN = 8
NUM_TOKENS, VOCAB_HIGH = 4, 9


class CueEnv(gymnasium.Env):
    """The rewarded action (0-3) is twice the parity of the first instruction token plus one when
    the first measurement is negative: the policy must read both non-image keys (reading one of
    them earns half). The image is noise. Episodes end by a time limit (truncated: the learner bootstraps from a Dict final obs)."""

    def __init__(self):
        self.observation_space = gymnasium.spaces.Dict({
            "obs": gymnasium.spaces.Box(0, 255, (3, 36, 36), np.uint8),
            "measurements": gymnasium.spaces.Box(-np.inf, np.inf, (3,), np.float32),
            "instr": gymnasium.spaces.Box(0, VOCAB_HIGH, (NUM_TOKENS,), np.int32),
        })
        self.action_space = gymnasium.spaces.Discrete(4)
        self.t = 0

    def _obs(self):
        rng = self.np_random
        tokens = np.zeros(NUM_TOKENS, np.int32)
        n = int(rng.integers(1, NUM_TOKENS + 1))
        tokens[:n] = rng.integers(1, VOCAB_HIGH + 1, size=n)
        m = rng.normal(size=3).astype(np.float32) * 5.0 + 10.0  # off-centre: the normalizer matters
        m[0] = rng.choice([-1.0, 1.0]) * rng.uniform(1, 3)
        self.answer = 2 * int(tokens[0] % 2) + int(m[0] < 0)
        return {"obs": rng.integers(0, 256, (3, 36, 36), dtype=np.uint8), "measurements": m, "instr": tokens}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        reward = 1.0 if int(action) == self.answer else 0.0
        self.t += 1
        return self._obs(), reward, False, self.t >= EPISODE_LEN, {}


def make_cue_env(full_env_name, cfg, env_config, render_mode=None):
    return CueEnv()


@pytest.fixture
def cue_env():
    register_env("tst_dict_cue", make_cue_env)
    yield "tst_dict_cue"
    unregister_env_family("tst_dict_cue")


def cue_cfg(tmp_path, env, **overrides):
    base = dict(env=env, experiment="d", train_dir=str(tmp_path), num_workers=1, num_envs_per_worker=4,
                worker_num_splits=2, rollout=16, recurrence=8, batch_size=128, hidden_size=64, device="cpu",
                seed=3, encoder_type="conv", encoder_subtype="convnet_simple", train_for_env_steps=2000,
                experiment_summaries_interval=1.0, report_every_sec=2.0, save_every_sec=1000)
    base.update(overrides)
    return default_cfg(**base)


def test_model_builds_one_encoder_per_key_and_scales_each_kind(cue_env, tmp_path):
    cfg = cue_cfg(tmp_path, cue_env, encoder_subtype="convnet_impala")
    env = CueEnv()
    model = create_actor_critic(cfg, env.observation_space, env.action_space)
    assert list(model.encoder.parts) == ["instr", "measurements", "obs"]
    assert model.obs_kinds == {"instr": "tokens", "measurements": "normalized", "obs": "scaled"}
    obs = {"obs": torch.full((2, 3, 36, 36), 255, dtype=torch.uint8),
           "measurements": torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]),
           "instr": torch.tensor([[3, 1, 0, 0], [0, 0, 0, 0]], dtype=torch.int32)}
    pre = model.preprocess_obs(obs)
    torch.testing.assert_close(pre["obs"], torch.ones(2, 3, 36, 36))
    assert pre["instr"].dtype == torch.int64
    model.update_obs_normalizer({"measurements": torch.randn(500, 3) * 2 + 7})
    assert abs(float(model.key_normalizers["measurements"].mean.mean()) - 7) < 0.5
    out = model.forward_step(obs, torch.zeros(2, model.rnn_state_size))
    assert out["action_params"].shape == (2, 4) and torch.isfinite(out["values"]).all()
    # token order matters (a GRU reads them), padding does not
    a = model.encoder.parts["instr"](torch.tensor([[3, 5, 0, 0]]))
    b = model.encoder.parts["instr"](torch.tensor([[5, 3, 0, 0]]))
    assert not torch.allclose(a, b)


def test_learner_recomputes_the_behaviour_policy_with_dict_obs(cue_env, tmp_path, monkeypatch):
    """As for Box observations: frozen weights -> ratio 1 and KL 0 over every stored step, which
    checks that every key of every step (and of the truncated episodes' final obs) was stored.

    With input normalization the statistics move while the weights do not, so a sample acted before
    the learner's last update of the statistics is evaluated with others: that is real policy lag,
    and V-trace corrects it. Samples of lag 0 must reproduce their log-probs up to float32 rounding,
    which is what this test checks (the learner sees only them here). That holds because the learner
    folds a batch into the statistics after training on it and publishes the new statistics with the
    next weights; taking the batch in before training (as before) evaluated even lag-0 samples with
    statistics the policy workers never had (ratio mean 1.00013, KL 9e-7 here).

    Tolerance: the recomputation runs the same float32 operations batched in another order (GRU over
    chunks of --recurrence steps instead of one step at a time, other matmul shapes), so log-probs
    differ by a few ulps per layer; 1e-5 on the ratio mean is ~80 float32 ulps at 1.0, ten times
    below the lag it must catch. bf16 encoders (--mixed_precision=auto on bf16 CPUs) round at 2^-8
    and are checked in tests/models/test_precision.py, so this test computes in float32."""
    real_learning_step = learner_module.learning_step
    train_step = [0]

    def lag0_only(model, optimizer, mb, valids, cfg, *args):
        stats = real_learning_step(model, optimizer, mb, valids & (mb["policy_versions"] == train_step[0]),
                                   cfg, *args)
        train_step[0] += 1
        return stats

    monkeypatch.setattr(learner_module, "learning_step", lag0_only)
    cfg = cue_cfg(tmp_path, cue_env, serial_mode=True, learning_rate=1e-12, use_rnn=True, rnn_type="gru",
                  recurrence=4, normalize_input=True, mixed_precision="off")
    result = run_training(cfg)
    stats = result["train_stats"][0]
    assert train_step[0] >= 10
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert abs(stats["kl"]) < 1e-6


@pytest.mark.slow
def test_dict_obs_learns_from_tokens_and_measurements_in_async_mode(cue_env, tmp_path):
    """Random play earns 2 of 8, reading one of the instruction and the measurement 4, both 8."""
    cfg = cue_cfg(tmp_path, cue_env, num_workers=2, use_rnn=False, learning_rate=1e-3, gamma=0.5,
                  train_for_env_steps=40_000, exploration_loss_coeff=0.001)
    result = run_training(cfg)
    assert result["status"] == "done"
    assert result["reward"][0] > 6.0, result["reward"]
