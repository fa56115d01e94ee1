"""The model's parts (preprocessing, trunk, heads) without the actor-critic, the one core signature, and
checkpoints written before the actor-critic was split into parts."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
from gymnasium import spaces

from sfx.algo.distributions import MASKED_LOGIT
from sfx.algo.normalizers import RunningMeanStd
from sfx.models import Core, MemoryCore, create_actor_critic, register_core, unregister_core
from sfx.models.cores import CoreStep, ForeignCore, IdentityCore, RnnCore, make_core
from sfx.models.heads import ActionParamsHead, ValueHead
from sfx.models.obs import map_obs
from sfx.models.popart import PopArt
from sfx.models.preprocess import ObsPreprocessor
from sfx.models.trunk import Trunk, join_states, make_trunk, split_memory, split_states
from sfx.models.trxl import TransformerXLCore

from model_helpers import make_cfg, random_obs, vector_space, seeded  # noqa: F401 (seeded: autouse fixture)

BEFORE_SPLIT = Path(__file__).parent / "data" / "actor_critic_before_split.pt"
TRXL = dict(rnn_type="trxl", hidden_size=8, n_layer=1, n_heads=2, d_head=4, d_inner=8, mem_len=3)


# ----- checkpoints from before the split ----------------------------------------------------------------

# What tests/models/data/actor_critic_before_split.pt was written from: the actor-critic of commit c00bde5
# (before the parts), seeded, its weights and statistics moved, then one forward_step recorded.
BEFORE_SPLIT_CASES = {
    "separate_lstm_box_popart": (dict(hidden_size=4, rnn_type="lstm", actor_critic_share_weights=False,
                                      adaptive_stddev=False, initial_stddev=0.5, popart=True,
                                      use_prev_action_reward=True),
                                 spaces.Box(-1, 1, shape=(2,), dtype=np.float32), 2),
    "shared_trxl_returns": (dict(TRXL, normalize_returns=True), spaces.Discrete(3), 1),
}


@pytest.mark.parametrize("case", sorted(BEFORE_SPLIT_CASES))
def test_a_state_dict_from_before_the_split_loads_and_acts_as_it_did(case):
    overrides, action_space, num_tasks = BEFORE_SPLIT_CASES[case]
    saved = torch.load(BEFORE_SPLIT, weights_only=True)[case]
    model = create_actor_critic(make_cfg(**overrides), vector_space(5), action_space, num_tasks=num_tasks)
    # the same names, in the same order; PopArt's data weight (the bias correction of its statistics) came since
    # and is inferred from mu and nu when a checkpoint lacks it
    assert [k for k in model.state_dict() if k != "popart.weight"] == list(saved["state_dict"])
    model.load_state_dict(saved["state_dict"])  # strict
    inputs = saved["inputs"]
    with torch.no_grad():
        out = model.forward_step(inputs["obs"], inputs["rnn_states"], inputs.get("tasks"), inputs.get("memory"))
    assert sorted(saved["outputs"]) == sorted(set(out) - {"core_output"})  # core_output: added since (replay)
    for key, expected in saved["outputs"].items():
        # the same arithmetic; a tolerance only for another CPU's kernels
        torch.testing.assert_close(out[key], expected, rtol=1e-6, atol=1e-6, msg=key)


def test_the_parts_modules_are_the_actor_critics_registered_once_under_their_old_names():
    cfg = make_cfg(actor_critic_share_weights=False, adaptive_stddev=False, popart=True, hidden_size=8)
    model = create_actor_critic(cfg, vector_space(5), spaces.Box(-1, 1, shape=(2,)), num_tasks=2)
    actor, critic = model.trunks
    assert (actor.encoder, actor.core, critic.encoder, critic.core) == (
        model.actor_encoder, model.actor_core, model.critic_encoder, model.critic_core)
    assert model.action_head is model.policy_head.linear and model.value_head is model.critic_head.linear
    assert model.action_log_std is model.policy_head.log_std and model.popart is model.critic_head.popart
    assert model.obs_normalizer is model.preprocessor.obs_normalizer
    names = [n for n, _ in model.named_parameters()]
    assert names[0] == "action_log_std" and not any(n.startswith(("trunks", "policy_head", "critic_head"))
                                                    for n in model.state_dict())
    assert len(names) == len(list(model.parameters())) == len({id(p) for p in model.parameters()})
    twin = copy.deepcopy(model)  # (what export does) the copy's parts hold the copy's modules
    assert twin.trunks[1].core is twin.critic_core and twin.policy_head.log_std is twin.action_log_std
    model.eval()
    assert not any(p.training for p in (model.preprocessor, actor, critic, model.policy_head, model.critic_head))
    model.train()
    assert actor.training and model.policy_head.training


def test_assigned_weights_reach_the_policy_head():
    model = create_actor_critic(make_cfg(adaptive_stddev=False, use_rnn=False), vector_space(3),
                                spaces.Box(-1, 1, shape=(2,)))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["action_log_std"] = torch.tensor([0.25, -0.5])
    model.load_state_dict(state, assign=True)
    assert model.policy_head.log_std is model.action_log_std
    out = model.forward_step(torch.randn(4, 3), model.initial_rnn_states(4))
    assert torch.equal(out["action_params"][:, 2:], torch.tensor([[0.25, -0.5]]).expand(4, 2))


# ----- parts without the actor-critic ---------------------------------------------------------------------

class TinyQNetwork(nn.Module):
    """A recurrent Q-network (R2D2-like) assembled from the parts: preprocess -> trunk -> one linear head."""

    def __init__(self, cfg, obs_space, action_space: spaces.Discrete):
        super().__init__()
        self.preprocessor = ObsPreprocessor.from_cfg(cfg, obs_space, action_space)
        self.trunk = make_trunk(cfg, self.preprocessor.encoder_space, self.preprocessor.extra_input_size)
        self.q = nn.Linear(self.trunk.out_size, int(action_space.n))

    def forward_step(self, obs, states, memory=None):
        x, _, extra = self.preprocessor(obs)
        step = self.trunk.forward_step(x, states, extra, memory)
        return self.q(step.out), step

    def forward_sequence(self, obs, states, resets, memory=None):
        B, T = resets.shape
        x, _, extra = self.preprocessor(map_obs(lambda v: v.reshape(B * T, *v.shape[2:]), obs))
        return self.q(self.trunk.forward_sequence(x, states, resets, extra, memory).out)


@pytest.mark.parametrize("core", ["none", "gru", "lstm", "trxl"])
def test_a_q_network_from_the_parts_steps_as_it_unrolls(core):
    gen = torch.Generator().manual_seed(2)
    cores = {"none": dict(use_rnn=False), "gru": dict(), "lstm": dict(rnn_type="lstm", rnn_num_layers=2),
             "trxl": TRXL}
    cfg = make_cfg(**{"hidden_size": 8, "use_prev_action_reward": True, **cores[core]})
    space = spaces.Box(0, 255, shape=(36, 40, 3), dtype=np.uint8)
    net = TinyQNetwork(cfg, space, spaces.Discrete(3))
    assert isinstance(net.trunk, Trunk) and isinstance(net.trunk.core, Core)
    assert any(k.startswith("preprocessor.obs_normalizer.") for k in net.state_dict())
    net.preprocessor.update_normalizer(random_obs(space, 8, gen=gen))

    B, T = 3, 5
    obs = {"obs": random_obs(space, B, T, gen=gen), "_prev_action": torch.randint(0, 4, (B, T, 1), generator=gen),
           "_prev_reward": torch.randn(B, T, 1, generator=gen)}
    resets = torch.rand(B, T, generator=gen) < 0.3
    trunk = net.trunk
    states = torch.zeros(B, max(1, trunk.state_size)) if core == "trxl" else torch.randn(B, max(1, trunk.state_size))
    memory = torch.randn(B, trunk.memory_len, trunk.memory_width, generator=gen) if trunk.memory_len else None
    with torch.no_grad():
        seq = net.forward_sequence(obs, states, resets, memory)
        # acting: one step at a time, the state reset where the sequence resets, each memory entry written
        h, mem, qs = states, None if memory is None else memory.clone(), []
        init = trunk.initial_state(B) if trunk.state_size else h
        for t in range(T):
            h = torch.where(resets[:, t:t + 1], init, h)
            q, step = net.forward_step({k: v[:, t] for k, v in obs.items()}, h, mem)
            assert isinstance(step, CoreStep) and (step.memory_entry is None) == (mem is None)
            if mem is not None:
                mem[torch.arange(B), trunk.memory_index(h)] = step.memory_entry
            h = step.states
            qs.append(q)
    assert seq.shape == (B, T, 3)
    torch.testing.assert_close(seq, torch.stack(qs, 1), rtol=1e-5, atol=1e-5)
    net.forward_sequence(obs, states, resets, memory).square().mean().backward()
    assert all(p.grad is not None for p in net.trunk.parameters() if p.requires_grad)


def test_two_trunks_share_the_engines_state_row_and_memory():
    cfg = make_cfg(hidden_size=4, rnn_type="lstm")
    trunks = [make_trunk(cfg, vector_space(3)), make_trunk(make_cfg(hidden_size=4), vector_space(3))]
    assert [t.state_size for t in trunks] == [8, 4]
    row = torch.arange(24.0).reshape(2, 12)
    actor, critic = split_states(row, trunks)
    assert torch.equal(actor, row[:, :8]) and torch.equal(critic, row[:, 8:])
    assert torch.equal(join_states([actor, critic], row, trunks), row)
    assert split_memory(None, trunks) == [None, None]
    stateless = [make_trunk(make_cfg(use_rnn=False), vector_space(3)) for _ in range(2)]
    dummy = torch.zeros(2, 1)
    assert all(s is dummy for s in split_states(dummy, stateless))  # the dummy column passes through
    assert join_states([dummy, dummy], dummy, stateless) is dummy


def test_the_heads_mask_choices_and_move_values_between_scales():
    head = ActionParamsHead(6, spaces.MultiDiscrete([2, 3]))
    mask = torch.tensor([[1, 0, 0, 1, 1], [0, 0, 1, 0, 0]])
    params = head(torch.randn(2, 6), mask)
    assert head.out_size == 5 and params.shape == (2, 5)
    assert params[0, 1] == MASKED_LOGIT and params[0, 2] == MASKED_LOGIT
    assert (params[1, :2] != MASKED_LOGIT).all()  # no allowed choice in that head: left unmasked
    box = ActionParamsHead(6, spaces.Box(-1, 1, shape=(2,)), adaptive_stddev=False, initial_stddev=0.5)
    assert box.linear.out_features == 2
    assert torch.allclose(box(torch.randn(3, 6))[:, 2:], torch.full((3, 2), float(np.log(0.5))))

    tasks = torch.tensor([0, 1, 1])
    popart = ValueHead(6, popart=PopArt(2, 3e-4, 1e-4))
    popart.popart.update(torch.tensor([10.0, -4.0, 2.0, 30.0]), torch.tensor([0, 1, 0, 1]), None, popart.linear)
    assert popart.linear.out_features == 2 and popart(torch.randn(3, 6), tasks).shape == (3,)
    returns = ValueHead(6, returns_normalizer=RunningMeanStd((), clip=None))
    returns.returns_normalizer.update(torch.tensor([5.0, 7.0, 9.0]))
    v = torch.tensor([1.0, -3.0, 8.0])
    for value_head in (popart, returns, ValueHead(6)):
        torch.testing.assert_close(value_head.denormalize(value_head.normalize(v, tasks), tasks), v)
    with pytest.raises(ValueError, match="not both"):
        ValueHead(6, PopArt(1, 3e-4, 1e-4), RunningMeanStd(()))


# ----- one core signature ----------------------------------------------------------------------------------

class LegacyDuckCore(nn.Module):
    """A registered core as today's docs allowed it: the Core interface without subclassing Core."""

    def __init__(self, input_size, hidden):
        super().__init__()
        self.out_size, self.state_size = hidden, hidden
        self.cell = nn.GRUCell(input_size, hidden)

    def initial_state(self, batch_size, device=None):
        return torch.zeros(batch_size, self.state_size, device=device)

    def forward_step(self, x, states):
        h = self.cell(x, states)
        return h, h

    def forward_sequence(self, x, states, resets):
        return Core.forward_sequence(self, x, states, resets)

    def reset_states(self, states, resets):
        return Core.reset_states(self, states, resets)


class LegacyMemoryCore(Core):
    """A memory declared on a plain Core subclass (the old dispatch looked at memory_len only)."""

    memory_len, memory_width = 3, 4

    def __init__(self, input_size):
        super().__init__()
        self.out_size, self.state_size = 4, 1
        self.proj = nn.Linear(input_size, 4)

    def memory_index(self, states):
        return states[:, 0].long() % 3

    def forward_step(self, x, states, memory):
        h = torch.tanh(self.proj(x) + memory.mean(1))
        return h, states + 1, h

    def forward_sequence(self, x, states, resets, memory):
        return MemoryCore.forward_sequence(self, x, states, resets, memory)


@pytest.fixture
def legacy_cores():
    register_core("legacy_duck", lambda cfg, n: LegacyDuckCore(n, cfg.hidden_size))
    register_core("legacy_memory", lambda cfg, n: LegacyMemoryCore(n))
    yield
    unregister_core("legacy_duck")
    unregister_core("legacy_memory")


@pytest.mark.parametrize("kind", ["identity", "gru", "lstm", "trxl", "legacy_duck", "legacy_memory"])
def test_every_core_has_the_one_signature(legacy_cores, kind):
    cfg = {"identity": make_cfg(use_rnn=False), "trxl": make_cfg(**TRXL)}.get(kind, make_cfg(rnn_type=kind,
                                                                                            hidden_size=8))
    core = make_core(cfg, 6)
    expected = {"identity": IdentityCore, "gru": RnnCore, "lstm": RnnCore, "trxl": TransformerXLCore,
                "legacy_duck": ForeignCore, "legacy_memory": ForeignCore}[kind]
    assert isinstance(core, Core) and type(core) is expected
    B, T = 3, 4
    states = core.initial_state(B) if core.state_size else torch.zeros(B, 1)
    memory = torch.randn(B, core.memory_len, core.memory_width) if core.memory_len else None
    step = core.step(torch.randn(B, 6), states, memory)
    assert isinstance(step, CoreStep) and step.out.shape == (B, core.out_size)
    assert step.states.shape == states.shape and (step.memory_entry is None) == (memory is None)
    assert core.unroll(torch.randn(B, T, 6), states, torch.zeros(B, T, dtype=torch.bool), memory).shape == (
        B, T, core.out_size)
    if memory is not None:
        with pytest.raises(ValueError, match="memory"):
            core.step(torch.randn(B, 6), states)


def test_a_wrapped_core_keeps_its_names_and_attributes(legacy_cores):
    model = create_actor_critic(make_cfg(rnn_type="legacy_duck", hidden_size=8), vector_space(4), spaces.Discrete(2))
    assert isinstance(model.core, ForeignCore) and isinstance(model.core.inner, LegacyDuckCore)
    assert model.core.cell is model.core.inner.cell  # attributes are looked up on the wrapped module
    keys = [k for k in model.state_dict() if k.startswith("core.")]
    assert keys == ["core." + k for k in LegacyDuckCore(12, 8).state_dict()]  # no "inner." level
    state = {k: torch.randn_like(v) if k.startswith("core.") else v for k, v in model.state_dict().items()}
    model.load_state_dict(state)  # strict: the names it saves are the names it loads
    assert torch.equal(model.core.inner.cell.weight_ih, state["core.cell.weight_ih"])
