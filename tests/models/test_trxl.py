"""Transformer-XL core (--rnn_type=trxl): acting step by step equals the learner's evaluation of the
same rollout, nothing crosses an episode start, the window is mem_len steps, memory writes are
idempotent, and bad settings fail clearly."""

from __future__ import annotations

import pytest
import torch
from gymnasium import spaces

from sfx.cfg import ConfigError
from sfx.registries import default_cfg
from sfx.models import MemoryCore, create_actor_critic
from sfx.models.trxl import TransformerXLCore, sinusoid_embedding

from model_helpers import make_cfg, random_obs, vector_space, seeded  # noqa: F401 (seeded: autouse fixture)


def trxl_cfg(**overrides):
    small = dict(rnn_type="trxl", hidden_size=16, mem_len=6, n_layer=2, n_heads=2, d_head=8, d_inner=32)
    small.update(overrides)
    return make_cfg(**small)


def act(model, obs, dones, states, memory, tasks=None):
    """What the engine does when acting: one forward_step per step, the entry written into the agent's
    memory at memory_index, the state reset to the initial one after a done. Returns the per-step
    outputs, the states before each step ``[B, T + 1, S]`` and the memory left after the last step."""
    B, T = dones.shape
    rows = torch.arange(B)
    init = model.initial_rnn_states(B)
    params, values, before = [], [], [states]
    memory = memory.clone()
    with torch.no_grad():
        for t in range(T):
            out = model.forward_step(obs[:, t], states, tasks, memory)
            memory[rows, out["memory_index"]] = out["memory_entry"]
            params.append(out["action_params"])
            values.append(out["values"])
            states = torch.where(dones[:, t:t + 1], init, out["new_rnn_states"])
            before.append(states)
        bootstrap = model.forward_step(obs[:, T], states, tasks, memory)["values"]
    return torch.stack(params, 1), torch.stack(values, 1), bootstrap, torch.stack(before, 1), memory


@pytest.mark.parametrize("gate", ["none", "gru"])
def test_the_sequence_pass_equals_the_step_loop_of_the_core(gate):
    core = TransformerXLCore(12, 16, 2, 2, 8, 32, mem_len=5, gate=gate).eval()
    B, T = 4, 13
    x = torch.randn(B, T, 12)
    resets = torch.zeros(B, T, dtype=torch.bool)
    resets[1, 4] = resets[2, 0] = resets[0, 9] = resets[3, 3] = resets[3, 4] = True
    states = torch.tensor([[3.0, 2.0], [5.0, 1.0], [2.0, 4.0], [0.0, 0.0]])
    memory = torch.randn(B, 6, 32)  # mem_len 5: a ring of 6 rows
    fast = core.forward_sequence(x, states, resets, memory)
    loop = MemoryCore.forward_sequence(core, x, states, resets, memory)  # the interface's reference loop
    assert torch.allclose(fast, loop, atol=1e-5)


@pytest.mark.parametrize("share", [True, False])
def test_acting_step_by_step_equals_the_learners_evaluation_of_the_rollout(share):
    """Two consecutive rollouts of the same agents: the second starts from the memory the first left
    (a rollout boundary) and both have episode ends inside; the learner's forward_trajectories of each
    gives what acting gave, bootstrap value included."""
    model = create_actor_critic(trxl_cfg(actor_critic_share_weights=share), vector_space(5), spaces.Discrete(3)).eval()
    assert model.memory_len == 7 and model.memory_width == (1 if share else 2) * 2 * 16
    B, T = 3, 8
    states = model.initial_rnn_states(B)
    memory = torch.zeros(B, model.memory_len, model.memory_width)
    for rollout in range(2):
        obs = random_obs(vector_space(5), B, T + 1)
        dones = torch.zeros(B, T, dtype=torch.bool)
        dones[0, 2] = dones[1, 6] = dones[2, 7] = True
        if rollout == 1:
            dones[:] = False
            dones[1, 0] = True
        params, values, bootstrap, before, new_memory = act(model, obs, dones, states, memory)
        with torch.no_grad():
            out = model.forward_trajectories({"obs": obs}, before, dones, recurrence=T, memory=memory)
        assert torch.allclose(out.action_params, params, atol=1e-5)
        assert torch.allclose(out.values, values, atol=1e-5)
        assert torch.allclose(out.bootstrap_values, bootstrap, atol=1e-5)
        states, memory = before[:, T], new_memory


def test_nothing_crosses_an_episode_start():
    """Changing every observation of the previous episode (and the memory it left) changes nothing
    from the reset on, when acting and in the learner's evaluation."""
    model = create_actor_critic(trxl_cfg(), vector_space(5), spaces.Discrete(3)).eval()
    B, T = 2, 10
    obs = random_obs(vector_space(5), B, T + 1)
    dones = torch.zeros(B, T, dtype=torch.bool)
    dones[:, 3] = True  # the new episode starts at step 4
    states = torch.tensor([[4.0, 1.0], [6.0, 3.0]])
    memory = torch.randn(B, model.memory_len, model.memory_width)
    other = obs.clone()
    other[:, :4] = random_obs(vector_space(5), B, 4)
    p1, v1, _, before, _ = act(model, obs, dones, states, memory)
    p2, v2, _, before2, _ = act(model, other, dones, states, torch.randn_like(memory))
    assert torch.allclose(p1[:, 4:], p2[:, 4:], atol=1e-6) and torch.allclose(v1[:, 4:], v2[:, 4:], atol=1e-6)
    assert not torch.allclose(p1[:, :4], p2[:, :4], atol=1e-3)  # before the reset they do differ
    with torch.no_grad():
        a = model.forward_trajectories({"obs": obs}, before, dones, recurrence=T, memory=memory)
        b = model.forward_trajectories({"obs": other}, before2, dones, recurrence=T, memory=torch.randn_like(memory))
    assert torch.allclose(a.action_params[:, 4:], b.action_params[:, 4:], atol=1e-6)


def test_a_step_sees_exactly_mem_len_steps_back():
    model = create_actor_critic(trxl_cfg(mem_len=4), vector_space(5), spaces.Discrete(3)).eval()
    T = 9
    obs = random_obs(vector_space(5), 1, T + 1)
    dones = torch.zeros(1, T, dtype=torch.bool)
    states, memory = model.initial_rnn_states(1), torch.zeros(1, 5, model.memory_width)

    def last_step(o):
        return act(model, o, dones, states, memory)[0][0, T - 1]

    base = last_step(obs)
    # one layer: step T-1 sees steps T-5 .. T-1; each further layer reaches mem_len steps further back
    one_layer = create_actor_critic(trxl_cfg(mem_len=4, n_layer=1), vector_space(5), spaces.Discrete(3)).eval()
    m1 = torch.zeros(1, 5, one_layer.memory_width)

    def last_step_one_layer(o):
        return act(one_layer, o, dones, states, m1)[0][0, T - 1]

    ref = last_step_one_layer(obs)
    inside, outside = obs.clone(), obs.clone()
    inside[0, T - 1 - 4] += 1.0   # 4 steps back: inside the window
    outside[0, T - 1 - 5] += 1.0  # 5 steps back: outside it
    assert not torch.allclose(last_step_one_layer(inside), ref, atol=1e-4)
    assert torch.allclose(last_step_one_layer(outside), ref, atol=1e-6)
    # two layers reach twice as far: 5 steps back now matters
    assert not torch.allclose(last_step(outside), base, atol=1e-4)


def test_doing_a_step_twice_writes_the_same_memory_row():
    """A restarted policy worker answers a resent request again: the entry lands on the same row, so the
    memory is what one answer would have left."""
    model = create_actor_critic(trxl_cfg(), vector_space(5), spaces.Discrete(3)).eval()
    obs = random_obs(vector_space(5), 2)
    states = torch.tensor([[6.0, 5.0], [2.0, 2.0]])
    memory = torch.randn(2, model.memory_len, model.memory_width)
    rows = torch.arange(2)
    with torch.no_grad():
        once = memory.clone()
        out = model.forward_step(obs, states, None, once)
        once[rows, out["memory_index"]] = out["memory_entry"]
        twice = memory.clone()
        for _ in range(2):
            out2 = model.forward_step(obs, states, None, twice)
            twice[rows, out2["memory_index"]] = out2["memory_entry"]
    assert torch.equal(once, twice)
    assert out["memory_index"].tolist() == [5, 2]
    assert out["new_rnn_states"].tolist() == [[6.0, 6.0], [3.0, 3.0]]  # valid capped at mem_len
    out = model.forward_step(obs, torch.tensor([[6.0, 6.0]]).expand(2, 2), None, memory)
    assert out["memory_index"].tolist() == [6, 6] and out["new_rnn_states"][0].tolist() == [6.0, 0.0]  # ring of 7


def test_the_learner_gets_gradients_but_not_through_the_memory():
    model = create_actor_critic(trxl_cfg(), vector_space(5), spaces.Discrete(3))
    B, T = 2, 5
    obs = random_obs(vector_space(5), B, T + 1)
    memory = torch.randn(B, model.memory_len, model.memory_width, requires_grad=True)
    states = torch.tensor([[6.0, 0.0], [3.0, 3.0]])
    before = states.unsqueeze(1).expand(B, T + 1, 2)
    out = model.forward_trajectories({"obs": obs}, before, torch.zeros(B, T, dtype=torch.bool), T, memory=memory)
    (out.action_params.sum() + out.values.sum()).backward()
    assert memory.grad is None
    grads = [p.grad for p in model.core.parameters() if p.requires_grad]
    assert all(g is not None for g in grads) and any(float(g.abs().sum()) > 0 for g in grads)


def test_the_memory_must_be_passed():
    model = create_actor_critic(trxl_cfg(), vector_space(5), spaces.Discrete(3))
    with pytest.raises(ValueError, match=r"pass memory \[2, 7, 32\], got None"):
        model.forward_step(random_obs(vector_space(5), 2), model.initial_rnn_states(2))


@pytest.mark.parametrize("flag,value,allowed", [("mem_len", 0, "integer >= 1"), ("n_heads", 0, "integer >= 1"),
                                                ("trxl_dropout", 1.5, r"\[0, 1\)"), ("trxl_gate", "lstm", "none, gru")])
def test_bad_settings_name_the_flag(flag, value, allowed):
    with pytest.raises(ConfigError, match=rf"--{flag}={value!r}.*allowed: .*{allowed}"):
        create_actor_critic(trxl_cfg(**{flag: value}), vector_space(5), spaces.Discrete(3))


def test_trxl_parses_with_brain_agents_names():
    cfg = default_cfg("gym_CartPole-v1", rnn_type="trxl", mem_len=512, n_layer=12, n_heads=8, d_head=64,
                      d_inner=2048, hidden_size=256)
    assert (cfg.mem_len, cfg.n_layer, cfg.n_heads, cfg.d_head, cfg.d_inner) == (512, 12, 8, 64, 2048)


def test_sinusoids():
    emb = sinusoid_embedding(5, 6)
    assert emb.shape == (5, 6)
    assert torch.allclose(emb[0], torch.tensor([0.0, 0.0, 0.0, 1.0, 1.0, 1.0]))
    assert torch.allclose(emb[2, 0], torch.tensor(2.0).sin())
