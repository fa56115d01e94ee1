"""The agents' kit (sfx/agents/kit.py): the gradient step (a non-finite loss or gradient applies nothing, the
norm is clipped as ``--max_grad_norm`` says), the target network (frozen, hard copy, Polyak averaging
against a plain loop, restored from a checkpoint or from the online weights) and the choice of Adam's fused
kernel (on CUDA only, unless an agent asks for it on the CPU; the plain one where PyTorch has none)."""

import copy

import pytest
import torch

from sfx.agents.base import NonFiniteBatch
from sfx.agents.kit import TargetNetwork, fused_adam, gradient_step, use_fused_adam


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))


def test_the_gradient_step_clips_like_a_plain_sgd_step_and_reports_the_norm():
    net, ref = _net(), _net()
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(1))
    norm = gradient_step((net(x) ** 2).sum() * 100, torch.optim.SGD(net.parameters(), lr=0.1), net.parameters(),
                         max_grad_norm=0.5)
    (ref(x) ** 2).sum().mul(100).backward()
    total = sum(float((p.grad ** 2).sum()) for p in ref.parameters()) ** 0.5
    assert float(norm) == pytest.approx(total, rel=1e-5) and total > 0.5
    with torch.no_grad():
        for p, q in zip(net.parameters(), ref.parameters()):
            assert torch.allclose(p, q - 0.1 * q.grad * 0.5 / total, atol=1e-6)
    # --max_grad_norm <= 0: measured, not clipped; None: neither
    unclipped = _net()
    assert float(gradient_step((unclipped(x) ** 2).sum() * 100, torch.optim.SGD(unclipped.parameters(), lr=0.1),
                               unclipped.parameters(), max_grad_norm=0.0)) == pytest.approx(total, rel=1e-5)
    assert gradient_step(net(x).sum(), torch.optim.SGD(net.parameters(), lr=0.1), net.parameters()) is None


@pytest.mark.parametrize("where", ["loss", "gradients"])
def test_a_non_finite_loss_or_gradient_applies_nothing(where):
    net = _net()
    before = copy.deepcopy(net.state_dict())
    optimizer = torch.optim.Adam(net.parameters(), lr=0.1)
    x = torch.randn(5, 3)
    if where == "loss":
        loss = net(x).sum() * float("nan")
    else:  # a finite loss (0) with an infinite gradient: d sqrt(s) / ds at s = 0
        w = net[0].weight
        loss = net(x).sum() + torch.sqrt((w - w.detach()).sum())
    if where == "gradients":
        assert bool(torch.isfinite(loss))
    with pytest.raises(NonFiniteBatch, match=where if where == "gradients" else "critic"):
        gradient_step(loss, optimizer, net.parameters(), "critic", max_grad_norm=40.0)
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())
    assert all(p.grad is None for p in net.parameters())


def test_the_target_network_is_a_frozen_copy_renewed_by_hard_copy_or_polyak():
    online = _net()
    target = TargetNetwork(online)
    assert not target.net.training and not any(p.requires_grad for p in target.net.parameters())
    old = copy.deepcopy(target.state_dict())
    with torch.no_grad():
        for p in online.parameters():
            p.add_(1.0)
    target.polyak_update(online, 0.1)
    for (k, t), o in zip(target.state_dict().items(), online.state_dict().values()):
        for i in range(t.numel()):  # the plain rule, element by element
            assert float(t.reshape(-1)[i]) == pytest.approx(0.9 * float(old[k].reshape(-1)[i])
                                                            + 0.1 * float(o.reshape(-1)[i]), abs=1e-6)
    target.hard_update(online)
    assert all(torch.equal(t, o) for t, o in zip(target.state_dict().values(), online.state_dict().values()))
    # from a checkpoint, or (none saved) from the online weights
    other = TargetNetwork(_net())
    other.load_state_dict(old, online)
    assert all(torch.equal(other.state_dict()[k], v) for k, v in old.items())
    other.load_state_dict(None, online)
    assert all(torch.equal(t, o) for t, o in zip(other.state_dict().values(), online.state_dict().values()))


def test_adam_is_fused_where_every_parameter_is_on_cuda_and_on_the_cpu_only_when_the_agent_asks():
    assert use_fused_adam({"cuda"}, all_floating=True)
    assert use_fused_adam({"cuda"}, all_floating=True, fused_on_cpu=True)
    assert not use_fused_adam({"cpu"}, all_floating=True)  # the CPU path stays PyTorch's default
    assert use_fused_adam({"cpu"}, all_floating=True, fused_on_cpu=True)
    assert not use_fused_adam({"cuda", "cpu"}, all_floating=True, fused_on_cpu=True)  # spread over devices
    assert not use_fused_adam({"cuda"}, all_floating=False)  # the kernel takes floating-point tensors only
    assert not use_fused_adam({"mps"}, all_floating=True, fused_on_cpu=True)
    assert not use_fused_adam(set(), all_floating=True)
    # here (no GPU): R2D2's optimizer is the plain one, SAC's the fused one it measured faster on the CPU
    net = _net()
    assert not fused_adam(net.parameters(), lr=0.1).defaults["fused"]
    assert fused_adam(net.parameters(), fused_on_cpu=True, lr=0.1).defaults["fused"]
    groups = fused_adam([{"params": [net[0].weight]}, {"params": [net[0].bias], "lr": 0.5}], fused_on_cpu=True, lr=0.1)
    assert groups.defaults["fused"] and [g["lr"] for g in groups.param_groups] == [0.1, 0.5]


def test_fused_adam_falls_back_to_the_plain_kernel_where_pytorch_has_none(monkeypatch):
    real = torch.optim.Adam
    asked = []

    def without_fused_kernel(params, **kwargs):
        asked.append(kwargs.get("fused"))
        if kwargs.get("fused"):
            raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of supported devices")
        return real(params, **kwargs)

    monkeypatch.setattr(torch.optim, "Adam", without_fused_kernel)
    net = _net()
    optimizer = fused_adam(net.parameters(), fused_on_cpu=True, lr=0.1, eps=1e-3)
    assert asked == [True, None] and not optimizer.defaults["fused"] and optimizer.defaults["eps"] == 1e-3
    # the same steps as a plain Adam
    ref = _net()
    plain = real(ref.parameters(), lr=0.1, eps=1e-3)
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(2))
    for o, n in ((optimizer, net), (plain, ref)):
        n(x).pow(2).sum().backward()
        o.step()
    assert all(torch.equal(p, q) for p, q in zip(net.parameters(), ref.parameters()))


def test_r2d2_and_sac_take_their_adam_from_the_kit():
    import gymnasium

    from sfx.agents.r2d2 import R2D2
    from sfx.agents.sac import SAC
    from sfx.registries import default_cfg
    from sfx.models.q_network import QNetwork
    from sfx.models.sac_model import SACModel

    cpu = torch.device("cpu")
    cfg = default_cfg(algo="R2D2", hidden_size=8)
    r2d2 = R2D2(cfg, QNetwork(cfg, gymnasium.spaces.Box(-1, 1, (4,)), gymnasium.spaces.Discrete(2)), cpu)
    assert not r2d2.optimizer.defaults["fused"] and r2d2.optimizer.defaults["eps"] == cfg.adam_eps  # CPU: as before
    cfg = default_cfg("gym_Pendulum-v1", algo="SAC", hidden_size=8)
    sac = SAC(cfg, SACModel(cfg, gymnasium.spaces.Box(-1, 1, (3,)), gymnasium.spaces.Box(-2, 2, (1,))), cpu)
    assert all(o.defaults["fused"] for o in (sac.actor_optimizer, sac.critic_optimizer, sac.alpha_optimizer))
