"""Sample Factory 1.x model options: --obs_subtract_mean, --adaptive_stddev / --initial_stddev and
--actor_critic_share_weights, from the preprocessing formula up to short real training runs.

The sequence == steps equality, the state size and the gradient coverage of separate actor and
critic weights are parametrized into tests/models/test_actor_critic.py.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
import torch.nn as nn
from gymnasium import spaces

from sfx.algo.distributions import make_action_distribution
from sfx.cfg import ConfigError
from sfx.registries import default_cfg
from sfx.engine.buffers import WeightsBuffer
from sfx.models import create_actor_critic, register_encoder, unregister_encoder

from model_helpers import image_space, make_cfg, random_obs, vector_space, seeded  # noqa: F401 (seeded: autouse fixture)

BOX2 = spaces.Box(-1.0, 1.0, (2,), np.float32)
EPS = 1e-5  # RunningMeanStd's default


# ----- --obs_subtract_mean --------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(36, 40, 3), (3, 36, 40)], ids=["HWC", "CHW"])
@pytest.mark.parametrize("sub, scale", [(128.0, 128.0), (100.0, 255.0), (0.0, 255.0)])
def test_subtract_mean_without_normalize_input_is_the_plain_formula(shape, sub, scale):
    cfg = make_cfg(normalize_input=False, obs_subtract_mean=sub, obs_scale=scale)
    model = create_actor_critic(cfg, image_space(shape), spaces.Discrete(2))
    x = random_obs(image_space(shape), 7)
    got = model.preprocess_obs(x)
    assert got.dtype == torch.float32
    assert torch.equal(got, (x.float() - sub) / scale)  # SF1: x = (x - obs_subtract_mean) / obs_scale


def plain_stats(frames: torch.Tensor, sub: float, scale: float, hwc: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-element mean and population variance of ``(x - sub) / scale`` over the batch, in (C, H, W)."""
    x = (frames.double() - sub) / scale
    if hwc:
        x = x.movedim(-1, -3)
    return x.mean(0), x.var(0, unbiased=False)


def plain_normalized(frames: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, sub: float, scale: float,
                     hwc: bool) -> torch.Tensor:
    x = (frames.double() - sub) / scale
    if hwc:
        x = x.movedim(-1, -3)
    y = ((x - mean) / torch.sqrt(var + EPS)).clamp(-5.0, 5.0)
    return y.movedim(-3, -1) if hwc else y


@pytest.mark.parametrize("shape", [(36, 40, 3), (3, 36, 40)], ids=["HWC", "CHW"])
def test_subtract_mean_with_normalize_input_is_the_plain_formula(shape):
    """The statistics are of (x - sub) / scale, and the fused pass standardizes exactly that; a second
    update refreshes the cached factors."""
    sub, scale = 128.0, 128.0
    hwc = shape[-1] == 3
    model = create_actor_critic(make_cfg(obs_subtract_mean=sub, obs_scale=scale), image_space(shape),
                                spaces.Discrete(2))
    gen = torch.Generator().manual_seed(1)
    seen = []
    for _ in range(2):
        # fewer rows than IMAGE_STATS_ROWS, so every frame is folded in
        frames = torch.randint(0, 200, (60, *shape), dtype=torch.uint8, generator=gen)
        seen.append(frames)
        model.update_obs_normalizer(frames)
        mean, var = plain_stats(torch.cat(seen), sub, scale, hwc)
        norm = model.obs_normalizer
        # RunningMeanStd sums frames this large in float32 chunks: agreement to float32 precision
        torch.testing.assert_close(norm.mean, mean, atol=1e-6, rtol=0)
        torch.testing.assert_close(norm.var, var, atol=1e-6, rtol=0)
        x = random_obs(image_space(shape), 5, gen=gen)
        got = model.preprocess_obs(x)
        assert got.dtype == torch.float32 and got.shape == x.shape
        torch.testing.assert_close(got.double(), plain_normalized(x, mean, var, sub, scale, hwc), atol=2e-6, rtol=0)


def test_subtract_mean_statistics_travel_under_the_usual_names():
    cfg = make_cfg(obs_subtract_mean=128.0, obs_scale=128.0)
    space = image_space((3, 36, 40))
    model = create_actor_critic(cfg, space, spaces.Discrete(2))
    model.update_obs_normalizer(random_obs(space, 40))
    plain = create_actor_critic(make_cfg(obs_scale=128.0), space, spaces.Discrete(2))
    assert set(model.state_dict()) == set(plain.state_dict())
    clone = create_actor_critic(cfg, space, spaces.Discrete(2))
    clone.load_state_dict(model.state_dict())
    x = random_obs(space, 3)
    assert torch.equal(clone.preprocess_obs(x), model.preprocess_obs(x))


def test_subtract_mean_leaves_vectors_and_tokens_alone():
    space = spaces.Dict({"img": image_space((36, 40, 3)), "vec": vector_space(4),
                         "ids": spaces.Box(0, 9, (3,), np.int64)})
    obs = {"img": random_obs(image_space((36, 40, 3)), 2), "vec": torch.randn(2, 4),
           "ids": torch.tensor([[1, 2, 3], [4, 5, 6]])}
    model = create_actor_critic(make_cfg(normalize_input=False, obs_subtract_mean=50.0), space, spaces.Discrete(2))
    out = model.preprocess_obs(obs)
    assert torch.equal(out["img"], (obs["img"].float() - 50.0) / 255.0)
    assert torch.equal(out["vec"], obs["vec"]) and torch.equal(out["ids"], obs["ids"])


# ----- --adaptive_stddev / --initial_stddev ---------------------------------------------------------

@pytest.mark.parametrize("share_weights", [True, False], ids=["shared", "separate"])
@pytest.mark.parametrize("initial_stddev", [1.0, 0.3])
def test_non_adaptive_stddev_is_one_learned_parameter(initial_stddev, share_weights):
    cfg = make_cfg(adaptive_stddev=False, initial_stddev=initial_stddev, actor_critic_share_weights=share_weights)
    action_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
    model = create_actor_critic(cfg, vector_space(4), action_space)
    assert model.action_head.out_features == 3  # the means only
    assert model.action_params_size == 6  # the buffers' layout [mean, log_std] is unchanged
    S = model.rnn_state_size

    def log_std(obs: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        return model.forward_step(obs, states)["action_params"][:, 3:]

    obs = torch.randn(5, 4) * 3
    at_init = log_std(obs, torch.randn(5, S))
    torch.testing.assert_close(at_init, torch.full((5, 3), math.log(initial_stddev)), atol=0, rtol=0)
    seq = model.forward_sequence(obs.reshape(1, 5, 4), torch.zeros(1, S), torch.zeros(1, 5, dtype=torch.bool))
    torch.testing.assert_close(seq["action_params"][0, :, 3:], at_init, atol=0, rtol=0)

    # learned: a policy-gradient loss moves it, and it stays the same for every observation
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    out = model.forward_step(obs, torch.zeros(5, S))
    dist = make_action_distribution(action_space, out["action_params"])
    actions = torch.randn(5, 3) * 2
    loss = -(dist.log_prob(actions) * torch.randn(5)).mean() - 0.1 * dist.entropy().mean()
    loss.backward()
    assert model.action_log_std.grad is not None and float(model.action_log_std.grad.abs().sum()) > 0
    optimizer.step()
    after = log_std(torch.randn(7, 4) * 5, torch.randn(7, S))
    assert not torch.allclose(after[0], at_init[0])
    torch.testing.assert_close(after, after[:1].expand(7, 3), atol=0, rtol=0)


def test_adaptive_stddev_depends_on_the_observation_and_ignores_initial_stddev():
    model = create_actor_critic(make_cfg(use_rnn=False, initial_stddev=0.3), vector_space(4), BOX2)
    assert model.action_log_std is None and model.action_head.out_features == 4
    log_std = model.forward_step(torch.randn(6, 4) * 3, torch.zeros(6, 1))["action_params"][:, 2:]
    assert log_std.std(0).min() > 1e-3  # a head output: differs between observations
    # as in SF1, the adaptive head starts from zero biases (log std near 0), whatever --initial_stddev says
    assert float(model.action_head.bias.detach().abs().max()) == 0.0


def test_discrete_actions_ignore_the_stddev_options():
    cfg = make_cfg(adaptive_stddev=False, initial_stddev=100.0)  # out of range, but unused
    model = create_actor_critic(cfg, vector_space(4), spaces.Discrete(5))
    assert model.action_log_std is None and model.action_head.out_features == 5


def test_initial_stddev_outside_the_distribution_range_is_refused():
    with pytest.raises(ConfigError, match=r"--initial_stddev=100.0 is not valid with --adaptive_stddev=False; "
                                          r"allowed: a number in \[0.006738, 7.389\]"):
        create_actor_critic(make_cfg(adaptive_stddev=False, initial_stddev=100.0), vector_space(4), BOX2)


@pytest.mark.parametrize("flag, message", [
    ("initial_stddev=0.0", "--initial_stddev=0.0 must be a finite number > 0"),
    ("initial_stddev=-1", "--initial_stddev=-1.0 must be a finite number > 0"),
    ("initial_stddev=inf", "--initial_stddev=inf must be a finite number > 0"),
    ("obs_subtract_mean=nan", "--obs_subtract_mean=nan must be a finite number"),
])
def test_bad_values_are_one_config_error_line(flag, message, tmp_path):
    from sfx.registries import parse_args

    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_args(["--env=gym_CartPole-v1", f"--train_dir={tmp_path}", f"--{flag}"], resume=False)


def test_flags_have_sf1_defaults():
    cfg = default_cfg("gym_CartPole-v1")
    assert (cfg.obs_subtract_mean, cfg.actor_critic_share_weights, cfg.adaptive_stddev, cfg.initial_stddev) == \
        (0.0, True, True, 1.0)


# ----- --actor_critic_share_weights=False -----------------------------------------------------------

def grads(loss: torch.Tensor, params: list[torch.Tensor]) -> float:
    """Total |gradient| of ``loss`` over ``params`` (unused ones count 0)."""
    gs = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
    return sum(float(g.abs().sum()) for g in gs if g is not None)


@pytest.mark.parametrize("use_rnn", [False, True], ids=["ff", "gru"])
def test_separate_weights_keep_the_losses_apart(use_rnn):
    cfg = make_cfg(actor_critic_share_weights=False, use_rnn=use_rnn, adaptive_stddev=False, initial_stddev=0.5)
    model = create_actor_critic(cfg, vector_space(4), BOX2)
    B, T = 3, 4
    resets = torch.tensor([[0, 1, 0, 0], [0, 0, 0, 0], [1, 0, 1, 0]], dtype=torch.bool)
    out = model.forward_sequence(random_obs(vector_space(4), B, T), torch.randn(B, max(1, model.rnn_state_size)),
                                 resets)
    policy_loss = out["action_params"].pow(2).sum()
    value_loss = out["values_normalized"].pow(2).sum()
    actor = [*nn.ModuleList([model.actor_encoder, model.actor_core, model.action_head]).parameters(),
             model.action_log_std]
    critic = list(nn.ModuleList([model.critic_encoder, model.critic_core, model.value_head]).parameters())
    assert grads(value_loss, actor) == 0.0 and grads(policy_loss, critic) == 0.0
    assert grads(value_loss, critic) > 0 and grads(policy_loss, actor) > 0
    # two networks, not one network named twice, and nothing else has weights
    assert not {id(p) for p in actor} & {id(p) for p in critic}
    assert {id(p) for p in actor} | {id(p) for p in critic} == {id(p) for p in model.parameters()}


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
def test_separate_state_is_the_actors_then_the_critics(rnn_type):
    cfg = make_cfg(actor_critic_share_weights=False, rnn_type=rnn_type, hidden_size=8)
    model = create_actor_critic(cfg, vector_space(3), spaces.Discrete(2))
    half = model.actor_core.state_size
    assert model.rnn_state_size == 2 * half == half + model.critic_core.state_size
    obs = torch.randn(4, 3)
    h = torch.randn(4, 2 * half)
    out = model.forward_step(obs, h)
    other_critic = torch.cat([h[:, :half], torch.randn(4, half)], 1)
    other_actor = torch.cat([torch.randn(4, half), h[:, half:]], 1)
    a = model.forward_step(obs, other_critic)
    c = model.forward_step(obs, other_actor)
    # the first half drives the actor only, the second the critic only
    assert torch.equal(a["action_params"], out["action_params"]) and not torch.allclose(a["values"], out["values"])
    assert torch.equal(c["values"], out["values"]) and not torch.allclose(c["action_params"], out["action_params"])
    assert torch.equal(a["new_rnn_states"][:, :half], out["new_rnn_states"][:, :half])
    assert torch.equal(c["new_rnn_states"][:, half:], out["new_rnn_states"][:, half:])
    # an episode start (the engine zeroes the whole row) resets both cores
    resets = torch.ones(4, 1, dtype=torch.bool)
    seq = model.forward_sequence(obs.unsqueeze(1), h, resets)
    zero = model.forward_step(obs, torch.zeros(4, 2 * half))
    torch.testing.assert_close(seq["action_params"][:, 0], zero["action_params"], atol=1e-6, rtol=0)
    torch.testing.assert_close(seq["values"][:, 0], zero["values"], atol=1e-6, rtol=0)


def test_custom_encoder_is_built_twice_for_separate_weights():
    built = []

    class Tiny(nn.Module):
        def __init__(self, cfg, obs_space):
            super().__init__()
            self.fc = nn.Linear(obs_space.shape[0], 6)
            self.out_size = 6
            self.inference = False
            built.append(self)

        def for_inference(self) -> None:
            self.inference = True

        def forward(self, x):
            return torch.tanh(self.fc(x))

    register_encoder("tiny_twice", Tiny)
    try:
        cfg = make_cfg(encoder_type="tiny_twice", actor_critic_share_weights=False)
        model = create_actor_critic(cfg, vector_space(4), spaces.Discrete(3))
        assert built == [model.actor_encoder, model.critic_encoder] and built[0] is not built[1]
        model.for_inference()
        assert all(e.inference for e in built) and not model.training
        with pytest.raises(ValueError, match="actor_critic_share_weights=True"):
            type(model)(cfg, vector_space(4), spaces.Discrete(3), encoder=Tiny(cfg, vector_space(4)))
    finally:
        unregister_encoder("tiny_twice")


@pytest.mark.parametrize("share_weights", [True, False], ids=["shared", "separate"])
def test_checkpoints_and_published_weights_carry_both_networks(share_weights):
    cfg = make_cfg(actor_critic_share_weights=share_weights, adaptive_stddev=False, rnn_type="lstm")
    space = image_space((3, 36, 40))
    learner = create_actor_critic(cfg, space, BOX2)
    learner.update_obs_normalizer(random_obs(space, 30))
    with torch.no_grad():
        learner.action_log_std.fill_(-0.7)
    obs = random_obs(space, 4)
    h = torch.randn(4, learner.rnn_state_size)
    want = learner.forward_step(obs, h)

    restored = create_actor_critic(cfg, space, BOX2)
    restored.load_state_dict(learner.state_dict())  # a checkpoint, as enjoy and resume load it
    worker = create_actor_critic(cfg, space, BOX2).for_inference()
    weights = WeightsBuffer.for_model(learner)
    weights.publish(learner, version=3)
    assert weights.read_into(worker, current_version=0) == 3
    for model in (restored, worker):
        got = model.forward_step(obs, h)
        for key in ("action_params", "values", "new_rnn_states"):
            torch.testing.assert_close(got[key], want[key], atol=1e-6, rtol=0)
    names = set(learner.state_dict())
    assert "action_log_std" in names
    if not share_weights:
        assert {n.split(".")[0] for n in names} >= {"actor_encoder", "actor_core", "critic_encoder", "critic_core"}


# ----- short real training runs ---------------------------------------------------------------------

def test_short_mujoco_run_with_separate_weights_and_a_learned_stddev(tmp_path):
    """The published MuJoCo hopper run's model options, through sampling, learning and a checkpoint."""
    from sfx.experiment.checkpoints import load_checkpoint
    from sfx.train import main

    args = ["--env=mujoco_invertedpendulum", "--experiment=ip", f"--train_dir={tmp_path}", "--device=cpu",
            "--serial_mode=True", "--num_workers=1", "--num_envs_per_worker=2", "--worker_num_splits=1",
            "--batch_size=256", "--train_for_env_steps=2048", "--seed=1",
            "--actor_critic_share_weights=False", "--adaptive_stddev=False", "--initial_stddev=0.5"]
    assert main(args) == 0
    (path,) = sorted((tmp_path / "ip" / "checkpoint_p0").glob("*.pth"))[-1:]
    state = load_checkpoint(path)["model"]
    assert {k.split(".")[0] for k in state} >= {"actor_encoder", "critic_encoder", "action_log_std"}
    log_std = state["action_log_std"]
    assert log_std.shape == (1,)  # InvertedPendulum has one action dimension
    assert float(log_std) != pytest.approx(math.log(0.5), abs=1e-6), "the stddev was not learned"


def test_short_recurrent_cartpole_run_with_separate_weights_then_enjoy(tmp_path, capsys):
    from sfx import enjoy
    from sfx.train import main

    where = ["--env=gym_CartPole-v1", "--experiment=cp", f"--train_dir={tmp_path}"]
    args = [*where, "--device=cpu", "--serial_mode=True", "--num_workers=1", "--num_envs_per_worker=2",
            "--worker_num_splits=1", "--rollout=16", "--recurrence=8", "--batch_size=64", "--hidden_size=16",
            "--use_rnn=True", "--rnn_type=lstm", "--actor_critic_share_weights=False",
            "--train_for_env_steps=1500", "--seed=1"]
    assert main(args) == 0
    assert list((tmp_path / "cp" / "checkpoint_p0").glob("*.pth"))
    capsys.readouterr()
    assert enjoy.main([*where, "--no_render", "--max_num_episodes=2"]) == 0
    assert "mean reward" in capsys.readouterr().out
