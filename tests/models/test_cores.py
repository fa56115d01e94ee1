"""The core interface and registry: custom cores by name, non-zero initial states, clear errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from gymnasium import spaces

from sfx.cfg import ConfigError
from sfx.registries import default_cfg
from sfx.models import Core, create_actor_critic, register_core, registered_cores, unregister_core
from sfx.models.cores import RnnCore, make_core

from model_helpers import make_cfg, random_obs, vector_space, seeded  # noqa: F401 (seeded: autouse fixture)

REPO = Path(__file__).resolve().parents[2]


class WindowCore(Core):
    """A memory of the last ``mem_len`` hidden states (a flat ``[mem_len * hidden]`` row, the way a
    Transformer-XL core stores its memory), with a learned, non-zero initial memory. Only
    ``forward_step`` is written: ``forward_sequence`` is the base class's loop."""

    def __init__(self, input_size: int, hidden: int, mem_len: int):
        super().__init__()
        self.hidden, self.mem_len = hidden, mem_len
        self.out_size = hidden
        self.state_size = mem_len * hidden
        self.inp = nn.Linear(input_size, hidden)
        self.mix = nn.Linear(2 * hidden, hidden)
        self.init_mem = nn.Parameter(torch.linspace(-1.0, 1.0, self.state_size))

    def initial_state(self, batch_size, device=None):
        return self.init_mem.to(device).expand(batch_size, -1)

    def forward_step(self, x, states):
        mem = states.reshape(-1, self.mem_len, self.hidden)
        h = torch.tanh(self.mix(torch.cat([self.inp(x), mem.mean(1)], dim=1)))
        new_mem = torch.cat([mem[:, 1:], h.unsqueeze(1)], dim=1)
        return h, new_mem.reshape(states.shape[0], -1)


class OffsetRnnCore(RnnCore):
    """A GRU/LSTM whose episodes start from a fixed non-zero state."""

    def initial_state(self, batch_size, device=None):
        row = torch.arange(self.state_size, dtype=torch.float32, device=device) / self.state_size - 0.3
        return row.expand(batch_size, -1)


@pytest.fixture
def window_core():
    register_core("window", lambda cfg, input_size: WindowCore(input_size, cfg.hidden_size, mem_len=3))
    yield "window"
    unregister_core("window")


@pytest.fixture
def offset_gru():
    register_core("offset_gru", lambda cfg, input_size: OffsetRnnCore(input_size, cfg.hidden_size, "gru", 2))
    yield "offset_gru"
    unregister_core("offset_gru")


def model_step_by_step(model, obs, rnn_init, resets):
    """What acting does: one ``forward_step`` per step, the row reset to ``initial_rnn_states``."""
    B, T = resets.shape
    h, params, values = rnn_init, [], []
    init = model.initial_rnn_states(B)
    for t in range(T):
        h = torch.where(resets[:, t].unsqueeze(1), init, h)
        out = model.forward_step(obs[:, t], h)
        params.append(out["action_params"])
        values.append(out["values"])
        h = out["new_rnn_states"]
    return torch.stack(params, 1), torch.stack(values, 1)


def core_step_by_step(core, x, states, resets):
    outs = []
    init = core.initial_state(x.shape[0])
    for t in range(x.shape[1]):
        states = torch.where(resets[:, t].unsqueeze(1), init, states)
        out, states = core.forward_step(x[:, t], states)
        outs.append(out)
    return torch.stack(outs, 1)


def mixed_resets(B, T, gen):
    resets = torch.rand(B, T, generator=gen) < 0.25
    resets[0] = False        # a row without any reset
    resets[1, 0] = True      # one reset at its first step
    resets[2, T - 1] = True  # and one at its last
    return resets


@pytest.mark.parametrize("share_weights", [True, False], ids=["shared", "separate"])
def test_custom_core_by_name_sequence_equals_steps_and_trains(window_core, share_weights):
    gen = torch.Generator().manual_seed(3)
    cfg = make_cfg(rnn_type=window_core, hidden_size=8, actor_critic_share_weights=share_weights)
    space = vector_space(5)
    model = create_actor_critic(cfg, space, spaces.Discrete(3))
    cores = [model.core] if share_weights else [model.actor_core, model.critic_core]
    assert all(isinstance(c, WindowCore) for c in cores)
    assert model.rnn_state_size == 24 * len(cores)
    init = model.initial_rnn_states(4)
    assert init.shape == (4, model.rnn_state_size) and not init.requires_grad
    assert torch.equal(init[0], torch.cat([c.init_mem.detach() for c in cores]))

    B, T = 5, 7
    obs = random_obs(space, B, T, gen=gen)
    rnn_init = torch.randn(B, model.rnn_state_size, generator=gen)
    resets = mixed_resets(B, T, gen)
    with torch.no_grad():
        ref_params, ref_values = model_step_by_step(model, obs, rnn_init, resets)
    seq = model.forward_sequence(obs, rnn_init, resets)
    torch.testing.assert_close(seq["action_params"], ref_params, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(seq["values"], ref_values, rtol=1e-5, atol=1e-6)

    # a learning step reaches every parameter of the core, the learned initial memory included
    (seq["action_params"].square().mean() + seq["values"].square().mean()).backward()
    for core in cores:
        for name, p in core.named_parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0, name
    before = cores[0].init_mem.detach().clone()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    assert not torch.equal(before, cores[0].init_mem)


def test_custom_core_name_passes_cfg_validation(window_core):
    assert window_core in registered_cores()
    assert default_cfg(rnn_type=window_core).rnn_type == window_core
    unregister_core(window_core)
    with pytest.raises(ConfigError, match=r"'window'"):
        default_cfg(rnn_type=window_core)


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("resets_kind", ["none", "first_only", "inside", "all"])
def test_nonzero_initial_state_sequence_equals_steps(rnn_type, layers, resets_kind):
    gen = torch.Generator().manual_seed(layers)
    core = OffsetRnnCore(4, 6, rnn_type, layers)
    assert core.initial_state(2).abs().sum() > 0
    B, T = 6, 8
    x = torch.randn(B, T, 4, generator=gen)
    states = torch.randn(B, core.state_size, generator=gen)
    resets = {"none": torch.zeros(B, T, dtype=torch.bool),
              "first_only": torch.zeros(B, T, dtype=torch.bool).index_fill(1, torch.tensor([0]), True),
              "inside": mixed_resets(B, T, gen),
              "all": torch.ones(B, T, dtype=torch.bool)}[resets_kind]
    with torch.no_grad():
        seq = core.forward_sequence(x, states, resets)
        ref = core_step_by_step(core, x, states, resets)
    torch.testing.assert_close(seq, ref, rtol=1e-5, atol=1e-6)


def test_nonzero_initial_state_through_the_model(offset_gru):
    gen = torch.Generator().manual_seed(5)
    cfg = make_cfg(rnn_type=offset_gru, hidden_size=6, actor_critic_share_weights=False)
    space = vector_space(4)
    model = create_actor_critic(cfg, space, spaces.Discrete(2))
    init = model.initial_rnn_states(3)
    assert torch.equal(init, torch.cat([model.actor_core.initial_state(3), model.critic_core.initial_state(3)], 1))
    B, T = 4, 6
    obs = random_obs(space, B, T, gen=gen)
    rnn_init = torch.randn(B, model.rnn_state_size, generator=gen)
    resets = mixed_resets(B, T, gen)
    with torch.no_grad():
        seq = model.forward_sequence(obs, rnn_init, resets)
        ref_params, ref_values = model_step_by_step(model, obs, rnn_init, resets)
    torch.testing.assert_close(seq["action_params"], ref_params, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(seq["values"], ref_values, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("use_rnn, rnn_type, share_weights, width", [
    (False, "gru", True, 1), (True, "gru", True, 16), (True, "lstm", True, 32), (True, "lstm", False, 64)])
def test_builtin_initial_states_are_zero_rows_of_the_stored_width(use_rnn, rnn_type, share_weights, width):
    model = create_actor_critic(make_cfg(use_rnn=use_rnn, rnn_type=rnn_type, actor_critic_share_weights=share_weights),
                                vector_space(3), spaces.Discrete(2))
    init = model.initial_rnn_states(5, "cpu")
    assert init.shape == (5, width) == (5, max(1, model.rnn_state_size))
    assert init.dtype == torch.float32 and not init.any()


def test_unknown_rnn_type_names_the_value_and_the_registered_names(window_core):
    with pytest.raises(ConfigError) as e:
        create_actor_critic(make_cfg(rnn_type="lsmt"), vector_space(3), spaces.Discrete(2))
    msg = str(e.value)
    assert "'lsmt'" in msg and "\n" not in msg
    for allowed in ("'gru'", "'lstm'", "'trxl'", "'window'"):
        assert allowed in msg
    with pytest.raises(ConfigError, match=r"--rnn_type='lsmt'.*'gru', 'lstm', 'trxl', 'window'"):
        default_cfg(rnn_type="lsmt")


def test_register_core_rejects_bad_names_factories_and_cores():
    with pytest.raises(ConfigError, match="non-empty string"):
        register_core("", lambda cfg, n: None)
    with pytest.raises(ConfigError, match="callable"):
        register_core("nofactory", 3)
    register_core("broken", lambda cfg, n: nn.Linear(n, 4))  # no out_size, state_size, forward_step...
    try:
        with pytest.raises(ConfigError, match=r"'broken'.*Linear.*Core interface"):
            make_core(make_cfg(rnn_type="broken"), 8)
    finally:
        unregister_core("broken")
    assert "broken" not in registered_cores()


def test_builtin_name_can_be_overridden_and_restored():
    register_core("gru", lambda cfg, n: OffsetRnnCore(n, cfg.hidden_size, "gru", 1))
    try:
        assert isinstance(make_core(make_cfg(rnn_type="gru"), 8), OffsetRnnCore)
    finally:
        unregister_core("gru")
    core = make_core(make_cfg(rnn_type="gru"), 8)
    assert type(core) is RnnCore and "gru" in registered_cores()


def test_cfg_checks_rnn_type_without_importing_torch():
    code = ("import sys\n"
            "from sfx.cfg.core_names import check_rnn_type, core_names\n"
            "import sfx.cfg\n"
            "check_rnn_type('lstm')\n"
            "try:\n"
            "    check_rnn_type('lsmt')\n"
            "except sfx.cfg.ConfigError as e:\n"
            "    print(e)\n"
            "assert 'torch' not in sys.modules\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "--rnn_type='lsmt'" in proc.stdout and "'gru', 'lstm'" in proc.stdout
