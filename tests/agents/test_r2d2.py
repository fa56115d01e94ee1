"""R2D2 on the engine (sfx/agents/r2d2.py, sfx/agents/sequence_replay.py, sfx/models/q_network.py): the
epsilon ladder over all actors, sequences stitched with their burn-in prefix from the same actor's previous
trajectory (the burned-in state equals the acting state), acting-side initial priorities, the replay
ratio's minibatch count, a training in worker processes that checkpoints the target network and resumes,
and the bad inputs."""

import json

import gymnasium
import pytest
import torch

from sfx.agents.r2d2 import R2D2, EpsilonGreedy
from sfx.agents.kit.sequence_replay import PrioritizedSequences, acting_priorities
from sfx.algo.qlearning import value_rescale, value_rescale_inverse
from sfx.cfg import ConfigError
from sfx.registries import default_cfg
from sfx.engine import run_training
from sfx.experiment import load_latest_checkpoint
from sfx.models.q_network import QNetwork
from tests.agents.stubs import ListedFresh

EPS_BASE_F32 = torch.tensor(0.4).item()  # the ladder's largest epsilon as the slots store it (float32)


def _cfg(tmp_path, **overrides):
    base = dict(env="gym_CartPole-v1", algo="R2D2", experiment="r2d2", train_dir=str(tmp_path), device="cpu", seed=3,
                num_workers=2, num_envs_per_worker=4, rollout=16, recurrence=16, burn_in=8, batch_size=128,
                hidden_size=32, use_rnn=True, rnn_type="gru", replay_ratio=2.0, replay_buffer_size=8000,
                learning_starts=320, target_update_period=50, learning_rate=1e-3, gamma=0.99,
                train_for_env_steps=6000)
    return default_cfg(**{**base, **overrides})


def test_each_actor_explores_with_its_own_epsilon_across_all_ranks():
    rule = EpsilonGreedy(3, 0.4, 7.0, 1e-3, seed=0)
    rule.bind_actors(first=4, total=8)  # the second of two ranks with 4 actors each
    expected = torch.tensor([0.4 ** (1 + 7 * i / 7) for i in range(4, 8)])
    assert torch.allclose(rule.epsilons, expected)
    q = torch.tensor([[0.0, 1.0, 0.5]] * 4000)
    ids = torch.arange(4).repeat(1000)
    acted = rule.act({"q_values": q}, actor_ids=ids)
    greedy = (acted.actions[:, 0] == 1).float()
    for i in range(4):  # a random action is the greedy one a third of the time
        explored = 1 - greedy[ids == i].mean()
        assert abs(explored - expected[i] * 2 / 3) < 4 * (expected[i] * 2 / 3 / 1000) ** 0.5 + 1e-3
    assert torch.equal(acted.fields["actor_ids"], ids) and torch.allclose(acted.fields["epsilon"], expected[ids])
    assert torch.equal(acted.fields["q_max"], torch.ones(4000))
    assert torch.equal(acted.fields["q_taken"], q.gather(1, acted.actions.long()).squeeze(1))
    # evaluation: the fixed low epsilon, whatever the actor
    assert (rule.act({"q_values": q}, deterministic=True).actions[:, 0] == 1).float().mean() > 0.99
    # an exploring actor never picks a masked action (its Q-value is MASKED_LOGIT)
    masked = torch.tensor([[-1e9, 1.0, -1e9], [0.0, -1e9, 2.0]]).repeat(500, 1)
    rule.bind_actors(first=0, total=1)  # epsilon 0.4
    actions = rule.act({"q_values": masked}, actor_ids=torch.zeros(1000, dtype=torch.long)).actions[:, 0]
    assert set(actions[0::2].tolist()) == {1.0} and set(actions[1::2].tolist()) == {0.0, 2.0}


def _acted_trajectories(model, steps, T, actors, seed=0):
    """``actors`` agents act ``steps`` steps with ``model`` (episodes of random length), recorded the way the
    slots hold them, cut into trajectories of ``T`` steps (obs ``T + 1``, rnn_states before each step)."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(actors, steps + 1, 4, generator=g)
    done = torch.rand(actors, steps, generator=g) < 0.05
    h = model.initial_rnn_states(actors)
    states = [h]
    q_taken, q_max, actions = [], [], []
    with torch.no_grad():
        for t in range(steps):
            out = model.forward_step(obs[:, t], h)
            a = torch.randint(0, 2, (actors,), generator=g)
            actions.append(a)
            q_taken.append(out["q_values"].gather(1, a.unsqueeze(1)).squeeze(1))
            q_max.append(out["q_values"].max(dim=1).values)
            h = torch.where(done[:, t:t + 1], model.initial_rnn_states(actors), out["new_rnn_states"])
            states.append(h)
    states = torch.stack(states, 1)
    q_taken, q_max, actions = torch.stack(q_taken, 1), torch.stack(q_max, 1), torch.stack(actions, 1)
    out = []
    for start in range(0, steps, T):
        sl = slice(start, start + T)
        out.append({"obs": {"obs": obs[:, start:start + T + 1]}, "rnn_states": states[:, start:start + T + 1],
                    "actions": actions[:, sl].unsqueeze(2).float(), "rewards": torch.ones(actors, T),
                    "terminated": done[:, sl], "truncated": torch.zeros(actors, T, dtype=torch.bool),
                    "active": torch.ones(actors, T, dtype=torch.bool), "trunc_q": torch.zeros(actors, T),
                    "policy_versions": torch.full((actors, T), start // T), "q_taken": q_taken[:, sl],
                    "q_max": q_max[:, sl], "epsilon": torch.full((actors, T), 0.1),
                    "actor_ids": torch.arange(actors).reshape(actors, 1).expand(actors, T).clone()})
    return out


def _store(fresh, capacity=50, burn_in=4, min_size=1, replay_ratio=1.0, per_mb=2):
    return PrioritizedSequences(fresh, capacity, burn_in, min_size, replay_ratio, lambda: per_mb, 0.9, 0.6, 0.9, 0.99,
                                3, 1e-3, torch.device("cpu"), seed=0)


def test_a_sequence_s_burn_in_prefix_is_the_actor_s_previous_steps_and_warms_up_to_the_acting_state():
    cfg = _cfg("/tmp", hidden_size=8)
    model = QNetwork(cfg, gymnasium.spaces.Box(-5, 5, (4,)), gymnasium.spaces.Discrete(2))
    trajs = _acted_trajectories(model, steps=24, T=8, actors=3)
    store = _store(ListedFresh(trajs), burn_in=4)
    for _ in trajs:
        store.next_batch(0)
    assert store.size == 9 and store.data["obs"]["obs"].shape == (50, 4 + 8 + 1, 4)
    has_prefix = store.data["has_prefix"][:9]
    assert has_prefix.tolist() == [False] * 3 + [True] * 6  # each actor's first trajectory has none
    for row in range(3, 9):
        k, actor = divmod(row, 3)
        prev, cur = trajs[k - 1], trajs[k]
        seq_obs = store.data["obs"]["obs"][row]
        assert torch.equal(seq_obs[:4], prev["obs"]["obs"][actor, 4:8]) and torch.equal(seq_obs[4:], cur["obs"]["obs"][actor])
        assert torch.equal(store.data["state0"][row], prev["rnn_states"][actor, 4])
        # the burn-in with the acting weights lands exactly on the state the actor had at the trained part's start
        term = store.data["terminated"][row:row + 1]
        resets = torch.cat([torch.zeros(1, 1, dtype=torch.bool), term[:, :3]], dim=1)
        warmed = model.advance_states({"obs": seq_obs[None, :4]}, store.data["state0"][row:row + 1], resets)
        start = cur["rnn_states"][actor:actor + 1, 0]
        if bool(term[0, 3]):  # the prefix's last step ended an episode: the trained part starts from a reset
            assert torch.equal(start, model.initial_rnn_states(1))
        else:
            assert torch.allclose(warmed, start, atol=1e-6)
    # a trajectory that does not continue the actor's previous one (a restarted worker) gets no prefix
    stray = _acted_trajectories(model, steps=8, T=8, actors=3, seed=9)[0]
    store.fresh.batches.append(stray)
    store.next_batch(0)
    assert not bool(store.data["has_prefix"][9:12].any())


def test_initial_priorities_come_from_the_acting_q_values():
    g = torch.Generator().manual_seed(1)
    r = torch.randn(3, 6, generator=g)
    term = torch.zeros(3, 6, dtype=torch.bool)
    term[0, 2] = True
    trunc = torch.zeros(3, 6, dtype=torch.bool)
    trunc[1, 4] = True
    q_taken, q_max, trunc_q = torch.randn(3, 6, generator=g), torch.randn(3, 6, generator=g), torch.randn(3, 6, generator=g)
    valids = torch.ones(3, 6, dtype=torch.bool)
    got = acting_priorities(r, term, trunc, q_taken, q_max, trunc_q, valids, 0.99, 3, 1e-3, 0.9)
    for b in range(3):
        td = []
        for t in range(6):
            ret, disc, boot = 0.0, 1.0, None
            for k in range(3):
                if t + k >= 6:
                    break
                ret += disc * float(r[b, t + k])
                disc *= 0.99
                if term[b, t + k]:
                    break
                if trunc[b, t + k]:
                    boot = disc * float(value_rescale_inverse(trunc_q[b, t + k]))
                    break
                if k == 2 or t + k == 5:
                    nxt = q_max[b, min(t + k + 1, 5)]
                    boot = disc * float(value_rescale_inverse(nxt))
            target = float(value_rescale(torch.tensor(ret + (boot or 0.0))))
            td.append(abs(target - float(q_taken[b, t])))
        expected = 0.9 * max(td) + 0.1 * sum(td) / 6
        assert abs(float(got[b]) - expected) < 1e-4 * max(1.0, expected)


def test_the_replay_ratio_sets_the_minibatches_and_learning_waits_for_the_minimum_fill():
    model = QNetwork(_cfg("/tmp", hidden_size=8), gymnasium.spaces.Box(-5, 5, (4,)), gymnasium.spaces.Discrete(2))
    trajs = _acted_trajectories(model, steps=40, T=8, actors=2)  # 5 iterations of 2 trajectories of 8 steps
    store = _store(ListedFresh(trajs), burn_in=4, min_size=4, replay_ratio=1.5, per_mb=2)  # a minibatch: 16 steps
    due = []
    for _ in trajs:
        store.next_batch(0)
        due.append(store.due())
    # 16 fresh steps x 1.5 = 24 trained steps per iteration; nothing before 4 sequences are stored
    assert due == [0, 1, 2, 1, 2] and store.credit == 0.0
    mb, valids = store.sample(3, policy_version=7)
    assert valids.shape == (3, 8) and mb["obs"]["obs"].shape == (3, 13, 4) and mb["weights"].max() == 1.0
    assert torch.all(mb["age"] == 7 - mb["policy_versions"][:, 4:].min(dim=1).values)
    # priorities given back change what is drawn: one sequence with all the priority is all that is drawn
    store.update_priorities(torch.arange(store.size), torch.zeros(store.size))
    store.update_priorities(torch.tensor([5]), torch.tensor([3.0]))
    assert set(store.sample(4, 0)[0]["ids"].tolist()) == {5}


def test_it_trains_in_worker_processes_checkpoints_the_target_network_and_resumes(tmp_path):
    cfg = _cfg(tmp_path, save_replay_buffer=True)
    result = run_training(cfg)
    assert result["status"] == "done" and result["env_steps"] >= 6000
    stats = result["train_stats"][0]
    assert {"loss/td", "q_mean", "td_abs_mean", "replay/fill", "replay/age_mean", "replay/priority_mean",
            "epsilon/min", "epsilon/max", "importance_weight_min", "burn_in_fraction"} <= set(stats)
    # epsilons are stored as float32: the largest is float32(0.4) = 0.40000000596
    assert 0 < stats["epsilon/min"] < stats["epsilon/max"] <= EPS_BASE_F32 and stats["burn_in_fraction"] > 0.5
    ckpt = load_latest_checkpoint(cfg, 0)
    assert {"optimizer", "target_model", "target_updates"} <= set(ckpt) and "advantage_stats" not in ckpt
    assert ckpt["target_updates"] == ckpt["train_step"] > 0
    # --save_replay_buffer: the replay is in the checkpoint, and the resumed run goes on with it
    assert ckpt["replay"]["size"] > 0 and ckpt["replay"]["data"]["obs"]["obs"].shape[0] == 500
    saved = json.loads((tmp_path / "r2d2" / "cfg.json").read_text())
    assert saved["algo"] == "R2D2" and saved["burn_in"] == 8 and "ppo_epochs" not in saved
    again = run_training(_cfg(tmp_path, train_for_env_steps=9000, save_replay_buffer=True))
    assert again["status"] == "done" and again["env_steps"] >= 9000
    # the resumed replay went on counting from the saved one (a refilled one would count 3,000 steps' worth only)
    assert again["train_stats"][0]["replay/inserted"] > ckpt["replay"]["inserted"] > 3000 / 16
    assert load_latest_checkpoint(cfg, 0)["train_step"] > ckpt["train_step"]


def test_seed_rl_s_defaults_and_the_bad_inputs_are_one_clear_line(tmp_path):
    # SEED's values where no env family sets its own for R2D2 (classic control does: tests/cfg/test_agent_flags.py)
    cfg = default_cfg(env="atari_breakout", algo="R2D2")
    assert (cfg.gamma, cfg.burn_in, cfg.rollout, cfg.n_step, cfg.max_grad_norm, cfg.replay_ratio) == \
           (0.997, 40, 80, 5, 40.0, 1.5)
    assert default_cfg(env="gym_CartPole-v1").gamma == 0.99  # APPO keeps its own
    for flags, message in [({"burn_in": 16}, r"--burn_in=16 must be shorter than a sequence \(--rollout=16\)"),
                           ({"replay_ratio": 0.0}, r"--replay_ratio=0.0 must be a finite number > 0"),
                           ({"n_step": 0}, r"--n_step=0 must be an integer >= 1"),
                           ({"learning_starts": 9000}, r"--learning_starts=9000 is more than")]:
        with pytest.raises(ConfigError, match=message) as e:
            _cfg(tmp_path, **flags)
        assert "\n" not in str(e.value)
    # a continuous action space: named, with the algorithms that take it, before cfg.json is written
    with pytest.raises(ConfigError, match=r"--algo=R2D2 needs a Discrete action space .* Box\(.*--algo=SAC"):
        run_training(_cfg(tmp_path, env="gym_Pendulum-v1", experiment="pendulum"))
    assert not (tmp_path / "pendulum" / "cfg.json").exists()
    # a buffer larger than the machine's memory: R2D2's own flag named (not APPO's --replay_parameters)
    with pytest.raises(ConfigError, match=r"--replay_buffer_size=1000000000 samples \(62,500,000 sequences\) need "
                                          r"[\d,]+ MiB of memory "
                                          r"per policy .*; lower --replay_buffer_size") as e:
        run_training(_cfg(tmp_path, experiment="huge", replay_buffer_size=10 ** 9))
    assert "replay_parameters" not in str(e.value)
    assert not (tmp_path / "huge" / "cfg.json").exists()
    # a core that keeps a memory of past steps
    with pytest.raises(ConfigError, match=r"--rnn_type=trxl keeps a memory"):
        QNetwork(_cfg(tmp_path, rnn_type="trxl"), gymnasium.spaces.Box(-1, 1, (4,)), gymnasium.spaces.Discrete(2))


def test_the_exported_graph_gives_the_greedy_action_and_the_q_values(tmp_path):
    from sfx.models.export import export_model
    from tests.test_export import onnx_runner

    cfg = _cfg(tmp_path)
    model = QNetwork(cfg, gymnasium.spaces.Box(-5, 5, (4,)), gymnasium.spaces.Discrete(3)).eval()
    rule = R2D2.acting_rule(cfg, model.action_space)
    spec = export_model(model, tmp_path / "q.onnx", "onnx", rule=rule)
    assert [o["name"] for o in spec["outputs"]] == ["actions", "q_values", "new_rnn_states"]
    assert "action_params" not in spec
    run = onnx_runner(tmp_path / "q.onnx", spec)
    obs, h = torch.randn(5, 4), model.initial_rnn_states(5)
    got = run({"obs": obs.numpy(), "rnn_states": h.numpy()})
    with torch.no_grad():
        ref = model.forward_step(obs, h)
    assert torch.equal(torch.from_numpy(got["actions"])[:, 0], ref["q_values"].argmax(dim=1))
    assert torch.allclose(torch.from_numpy(got["q_values"]), ref["q_values"], atol=1e-5)


class _Published:
    def publish(self, model, version):
        pass


class _Reports(list):
    put = list.append


class _SpiedSequences(PrioritizedSequences):
    """The real store, recording the priority updates it is given."""

    def update_priorities(self, ids, priorities):
        self.given = getattr(self, "given", []) + [(ids.clone(), priorities.clone())]
        super().update_priorities(ids, priorities)


def test_the_step_returns_the_new_priorities_and_the_learner_gives_them_back_through_its_sample_source():
    from sfx.agents import Stepped
    from sfx.engine.learner import Learner

    cfg = _cfg("/tmp", hidden_size=8, rollout=8, recurrence=8, burn_in=4, batch_size=16, replay_ratio=1.0,
               learning_starts=16)
    model = QNetwork(cfg, gymnasium.spaces.Box(-5, 5, (4,)), gymnasium.spaces.Discrete(2))
    trajs = _acted_trajectories(model, steps=32, T=8, actors=2)
    learner = Learner(cfg, 0, R2D2, model, None, _Published(), None, _Reports(), torch.device("cpu"))
    agent = learner.agent
    store = _SpiedSequences(ListedFresh(trajs), 50, 4, 2, 1.0, lambda: 2, 0.9, 0.6, 0.9, 0.99, 5, 1e-3,
                            torch.device("cpu"), seed=0)
    learner.source = agent.store = store
    # the step alone leaves the store's priorities as they were: it returns the new ones
    store.next_batch(0)
    store.next_batch(0)
    before = store.sampler.get(torch.arange(store.size)).clone()
    mb, valids = store.sample(2)
    out = agent.step(mb, valids)
    assert isinstance(out, Stepped) and torch.equal(out.ids, mb["ids"]) and out.priorities.shape == (2,)
    assert torch.equal(store.sampler.get(torch.arange(store.size)), before) and not hasattr(store, "given")
    # the learner's iteration hands each step's priorities back through its source
    for _ in range(2):
        learner.train_iteration()
    assert len(store.given) == learner.train_step >= 2
    for ids, priorities in store.given[-1:]:
        assert torch.allclose(store.sampler.get(ids), priorities.double())
    # the batch handed on says where each fresh trajectory was stored
    batch = PrioritizedSequences(ListedFresh(trajs[:1]), 50, 4, 2, 1.0, lambda: 2, 0.9, 0.6, 0.9, 0.99, 5, 1e-3,
                                 torch.device("cpu"), seed=0).next_batch(0)
    assert batch.ids.tolist() == [0, 1]
