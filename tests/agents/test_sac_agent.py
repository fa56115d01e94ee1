"""SAC on the engine (sfx/agents/sac.py, sfx/agents/transition_replay.py, sfx/models/sac_model.py): the acting
rule's bounds and modes, the transition replay's next observations (the final one at a time limit, none after a
termination) and n-step windows, one learner step (critics change, target copies move by tau), the replay
ratio's gradient steps, a training in worker processes that checkpoints everything learned and resumes, and
the bad inputs."""

import json

import gymnasium
import pytest
import torch

from sfx.agents.sac import SAC, SquashedGaussianActing
from sfx.agents.kit.transition_replay import TransitionReplay, bootstrap_steps
from sfx.algo.sac import actor_loss, critic_loss
from sfx.cfg import ConfigError
from sfx.registries import default_cfg
from sfx.engine import run_training
from sfx.experiment import load_latest_checkpoint
from sfx.models.sac_model import SACModel
from tests.agents.stubs import ListedFresh


def _cfg(tmp_path, **overrides):
    base = dict(env="gym_Pendulum-v1", algo="SAC", experiment="sac", train_dir=str(tmp_path), device="cpu", seed=3,
                num_workers=2, num_envs_per_worker=2, rollout=16, batch_size=64, hidden_size=32,
                learning_starts=100, replay_ratio=16.0, replay_buffer_size=5000, train_for_env_steps=640)
    return default_cfg(**{**base, **overrides})


def _trajectories(n, T, obs_dim=3, act_dim=2, start=0.0, version=0):
    """``n`` trajectories whose observation at step t of row b is ``start + 1000 b + t`` (every element), so a
    drawn observation says where it came from; final observations are their negatives."""
    ids = start + 1000 * torch.arange(n).reshape(n, 1) + torch.arange(T + 1).reshape(1, T + 1)
    obs = ids.unsqueeze(2).expand(n, T + 1, obs_dim).clone()
    return {"obs": {"obs": obs}, "final_obs": {"obs": -obs[:, :T].clone()},
            "actions": torch.rand(n, T, act_dim) * 2 - 1, "rewards": ids[:, :T].clone(),
            "terminated": torch.zeros(n, T, dtype=torch.bool), "truncated": torch.zeros(n, T, dtype=torch.bool),
            "active": torch.ones(n, T, dtype=torch.bool), "policy_versions": torch.full((n, T), version),
            "rnn_states": torch.zeros(n, T + 1, 1)}


def test_the_acting_rule_samples_inside_the_bounds_and_acts_with_the_squashed_mean_for_evaluation():
    low, high = torch.tensor([-2.0, 0.0]), torch.tensor([1.0, 5.0])
    rule = SquashedGaussianActing(low, high, seed=0)
    out = {"action_mean": torch.randn(4000, 2) * 3, "action_log_std": torch.full((4000, 2), 1.0)}
    acted = rule.act(out)
    a = acted.actions
    assert a.shape == (4000, 2) and acted.fields == {}
    assert bool((a >= low).all() and (a <= high).all()) and bool((a > low + 1e-3).any(dim=0).all())
    assert float(a.std(dim=0).min()) > 0.1  # sampled, not the mean
    mode = low + (torch.tanh(out["action_mean"]) + 1) / 2 * (high - low)
    assert torch.allclose(rule.act(out, deterministic=True).actions, mode)
    assert torch.allclose(rule.mode_actions(out), mode)
    # the same seed, the same actions
    assert torch.equal(SquashedGaussianActing(low, high, seed=0).act(out).actions, a)
    assert rule.stores_final_obs and rule.truncation_field is None


def test_a_training_policy_worker_acts_uniformly_for_its_warm_up_rows_and_never_in_evaluation():
    low, high = torch.tensor([-3.0, 0.0]), torch.tensor([3.0, 1.0])
    out = {"action_mean": torch.full((100, 2), 4.0), "action_log_std": torch.full((100, 2), -5.0)}
    mode = low + (torch.tanh(torch.tensor(4.0)) + 1) / 2 * (high - low)  # where the actor puts everything
    rule = SquashedGaussianActing(low, high, seed=0, random_steps=250)
    assert torch.allclose(rule.act(out).actions, mode.expand(100, 2), atol=1e-3)  # not bound: no warm-up
    rule.bind_actors(first=0, total=4)
    warm = torch.cat([rule.act(out).actions for _ in range(3)])  # 300 rows: 250 uniform, then the actor's
    uniform, after = warm[:250], warm[250:]
    assert bool((uniform >= low).all() and (uniform <= high).all())
    # uniform over the bounds: spread across them, mean near the middle (std of a mean of 250: range/55)
    assert torch.allclose(uniform.mean(0), (low + high) / 2, atol=4 * float((high - low).max()) / 55)
    assert bool((uniform.max(0).values - uniform.min(0).values > 0.9 * (high - low)).all())
    assert torch.allclose(after, mode.expand(50, 2), atol=1e-3)
    # evaluation and enjoy (deterministic) never act at random, even during the warm-up
    fresh = SquashedGaussianActing(low, high, seed=0, random_steps=250)
    fresh.bind_actors(first=0, total=4)
    assert torch.allclose(fresh.act(out, deterministic=True).actions, mode.expand(100, 2))
    # the agent's rule: --learning_starts rows, shared by the acting processes the engine names; --random_warmup=False:
    # none
    shared = SAC.acting_rule(default_cfg(env="gym_Pendulum-v1", algo="SAC", learning_starts=301,
                                         policy_workers_per_policy=2), gymnasium.spaces.Box(-2.0, 2.0, (1,)))
    assert shared.random_steps == 301
    shared.bind_actors(first=0, total=4, workers=2)
    assert shared.random_left == 151
    assert SAC.acting_rule(default_cfg(env="gym_Pendulum-v1", algo="SAC", random_warmup=False),
                           gymnasium.spaces.Box(-2.0, 2.0, (1,))).random_steps == 0


def test_the_learner_works_in_unit_actions_so_an_env_s_action_units_do_not_change_learning(tmp_path):
    # one agent on bounds [-1, 1], one on [-3, 3] with the same weights, fed the same transitions (actions x3 in
    # the second's replay, as its env was given them): every learning figure is the same
    stats = []
    for scale in (1.0, 3.0):
        torch.manual_seed(0)
        cfg = _cfg(tmp_path, batch_size=32, learning_starts=0, seed=5)
        model = SACModel(cfg, gymnasium.spaces.Box(-1.0, 1.0, (3,)), gymnasium.spaces.Box(-scale, scale, (2,)))
        agent = SAC(cfg, model, torch.device("cpu"))
        store = agent.sample_source(ListedFresh([]))
        data = _trajectories(4, 16)
        data["obs"]["obs"] = data["obs"]["obs"] / 1000.0
        data["final_obs"]["obs"] = data["final_obs"]["obs"] / 1000.0
        data["actions"] = data["actions"] * scale
        store.fresh.batches = [data]
        mbs = list(agent.minibatches(store.next_batch(0)))
        stats.append([agent.step(*mb) for mb in mbs[:3]])
    for one, three in zip(*stats):
        for key in ("loss/q1", "loss/q2", "loss/actor", "loss/alpha", "q1_mean", "entropy", "alpha"):
            assert one[key] == pytest.approx(three[key], rel=1e-4, abs=1e-6), key
    # and the entropy is the squashed action's in [-1, 1]: its target -dim(A) whatever the bounds
    assert SAC(_cfg(tmp_path), SACModel(_cfg(tmp_path), gymnasium.spaces.Box(-1.0, 1.0, (3,)),
                                        gymnasium.spaces.Box(-3.0, 3.0, (2,))), torch.device("cpu")).target_entropy == -2


def test_iterations_take_one_trajectory_per_env_and_queue_one_iteration_of_slots(tmp_path):
    # the actors wait for slots at a replay ratio: each queued slot is policy lag
    cfg = _cfg(tmp_path)  # 2 workers x 2 envs, rollout 16, batch 64
    assert SAC.trajectories_per_iteration(cfg) == 4 and cfg.traj_buffers_excess_ratio == 1.0
    assert SAC.trajectories_per_iteration(_cfg(tmp_path, num_workers=8, num_envs_per_worker=4)) == 4  # 64 // 16
    assert default_cfg(env="gym_CartPole-v1").traj_buffers_excess_ratio == 2.0  # APPO's stays


def test_a_transition_s_next_observation_is_the_final_one_at_a_time_limit_and_terminations_cut():
    data = _trajectories(2, 8)
    data["truncated"][0, 3] = True
    data["terminated"][1, 5] = True
    data["active"][1, 6] = False
    store = TransitionReplay(ListedFresh([data]), capacity=64, learning_starts=0, replay_ratio=1.0, gamma=0.9, n_step=1,
                             device=torch.device("cpu"), seed=0)
    store.next_batch(0)
    assert store.valid_count == 15 and store.rows == 8
    mb, valids = store.sample(2000, policy_version=4)
    assert valids.shape == (2000,) and bool(valids.all())
    o, nxt = mb["obs"]["obs"][:, 0], mb["next_obs"]["obs"][:, 0]
    row, t = (o // 1000).long(), (o % 1000).long()
    assert not bool(((row == 1) & (t == 6)).any())  # an inactive step is never drawn
    assert set(zip(row.tolist(), t.tolist())) == {(b, s) for b in range(2) for s in range(8)} - {(1, 6)}
    trunc = (row == 0) & (t == 3)
    assert torch.equal(nxt[trunc], -o[trunc])  # the episode's final observation, not the reset one
    assert torch.equal(nxt[~trunc], o[~trunc] + 1)
    term = (row == 1) & (t == 5)
    assert bool((mb["discounts"][term] == 0).all()) and bool((mb["discounts"][~term] == 0.9).all())
    assert torch.equal(mb["rewards"], o)
    assert torch.equal(mb["age"], torch.full((2000,), 4.0))
    assert torch.equal(mb["actions"], data["actions"][row, t])


def test_n_step_windows_sum_rewards_and_bootstrap_where_the_loop_says():
    g = torch.Generator().manual_seed(2)
    data = _trajectories(3, 10)
    data["rewards"] = torch.randn(3, 10, generator=g)
    data["terminated"][0, 4] = True
    data["truncated"][1, 6] = True
    data["active"][2, 3:5] = False
    gamma, n = 0.9, 3
    store = TransitionReplay(ListedFresh([data]), capacity=100, learning_starts=0, replay_ratio=1.0, gamma=gamma, n_step=n,
                             device=torch.device("cpu"), seed=0)
    store.next_batch(0)
    boot = bootstrap_steps(data["active"], data["terminated"], data["truncated"], n)
    for b in range(3):
        for t in range(10):
            if not data["active"][b, t]:
                continue
            ret, k, j = 0.0, 0, t
            disc = 1.0
            while True:  # sfx.algo.nstep's loop over raw steps
                if data["active"][b, j] and k == n:
                    j -= 1
                    break
                ret += gamma ** k * float(data["rewards"][b, j])
                k += int(data["active"][b, j])
                if data["terminated"][b, j]:
                    disc = 0.0
                    break
                if data["truncated"][b, j] or j == 9:
                    break
                j += 1
            disc = disc * gamma ** k
            assert int(boot[b, t]) == j, (b, t)
            assert abs(float(store.data["nstep_rewards"][b, t]) - ret) < 1e-5, (b, t)
            assert abs(float(store.data["discounts"][b, t]) - disc) < 1e-6, (b, t)


def test_the_replay_ratio_sets_the_gradient_steps_after_learning_starts():
    batches = [_trajectories(2, 8, start=10_000 * i) for i in range(5)]  # 16 transitions each
    # a replay ratio of 3 trained transitions per fresh one, in minibatches of 4: 0.75 gradient steps per env step
    store = TransitionReplay(ListedFresh(batches), capacity=40, learning_starts=32, replay_ratio=3.0, gamma=0.99,
                             n_step=1, device=torch.device("cpu"), seed=0)
    due = []
    for _ in batches:
        store.next_batch(0)
        due.append(store.due(4))
    # nothing before 32 stored; then 3 x 16 = 48 trained transitions = 12 minibatches of 4 per 16 fresh ones
    assert due == [0, 12, 12, 12, 12] and store.stats()["replay/updates_per_step"] == 0.75
    # a ring of 40 transitions (5 rows of 8): the oldest rows were overwritten
    assert store.rows == 5 and store.valid_count == 40
    drawn = store.sample(500, 0)[0]["obs"]["obs"][:, 0]
    assert float(drawn.min()) >= 10_000 * 2 + 1000  # rows of the first two batches and the third's first: gone


def test_one_step_changes_the_critics_and_moves_the_target_copies_by_tau(tmp_path):
    cfg = _cfg(tmp_path, batch_size=32, tau=0.1, learning_starts=0, replay_ratio=8.0)
    space = gymnasium.spaces.Box(-1.0, 1.0, (3,))
    model = SACModel(cfg, space, gymnasium.spaces.Box(-1.0, 1.0, (2,)))
    agent = SAC(cfg, model, torch.device("cpu"))
    store = agent.sample_source(ListedFresh([]))
    data = _trajectories(4, 16)
    data["obs"]["obs"] = data["obs"]["obs"] / 1000.0
    data["final_obs"]["obs"] = data["final_obs"]["obs"] / 1000.0
    store.fresh.batches = [data]
    batch = store.next_batch(0)
    mbs = list(agent.minibatches(batch))
    assert len(mbs) == 16  # 64 transitions x 0.25
    critic0 = {k: v.clone() for k, v in model.critic.state_dict().items()}
    target0 = {k: v.clone() for k, v in agent.target_critic.state_dict().items()}
    actor0 = {k: v.clone() for k, v in model.actor.state_dict().items()}
    alpha0 = float(agent.alpha)
    stats = agent.step(*mbs[0])
    critic1 = model.critic.state_dict()
    assert all(not torch.equal(critic0[k], critic1[k]) for k in critic0)
    assert any(not torch.equal(actor0[k], v) for k, v in model.actor.state_dict().items())
    for k, v in agent.target_critic.state_dict().items():
        assert torch.allclose(v, 0.9 * target0[k] + 0.1 * critic1[k], atol=1e-6), k
    assert float(agent.alpha) != alpha0
    assert {"loss/critic", "loss/q1", "loss/q2", "loss/actor", "loss/alpha", "q1_mean", "q2_mean", "alpha",
            "entropy", "replay/age_mean"} <= set(stats)
    # a fixed temperature stays where it is
    fixed = SAC(_cfg(tmp_path, sac_alpha=0.2), SACModel(cfg, space, gymnasium.spaces.Box(-1.0, 1.0, (2,))),
                torch.device("cpu"))
    fixed.sample_source(store)
    assert fixed.step(*mbs[1])["alpha"] == pytest.approx(0.2) and "loss/alpha" not in fixed.step(*mbs[2])


def test_an_image_observation_shares_one_encoder_trained_by_the_critic_loss_only(tmp_path):
    cfg = _cfg(tmp_path, encoder_type="conv", encoder_subtype="convnet_simple")
    model = SACModel(cfg, gymnasium.spaces.Box(0, 255, (3, 36, 36), dtype="uint8"),
                     gymnasium.spaces.Box(-1.0, 1.0, (2,)))
    assert model.shared_encoder and model.learner_only_prefixes == ("critic.q1.", "critic.q2.")
    agent = SAC(cfg, model, torch.device("cpu"))
    obs = torch.randint(0, 255, (8, 3, 36, 36), dtype=torch.uint8)
    pre = model.preprocess(obs)
    features = model.critic.features(pre.x)
    sample = agent._dist(*model.policy(pre, features)).rsample()
    q1, q2 = model.q_values(pre, sample.action, features.detach())  # as the step evaluates the actor's actions
    (actor_loss(sample.log_prob, q1, q2, 0.1) + sample.action.sum()).backward()
    assert all(p.grad is None or not bool(p.grad.any()) for p in model.critic.encoder.parameters())
    assert any(p.grad is not None and bool(p.grad.any()) for p in model.actor.parameters())
    # the critic loss does train it
    q1, q2 = model.q_values(pre, sample.action.detach(), features)
    critic_loss(q1, q2, torch.zeros(8)).loss.backward()
    assert any(p.grad is not None and bool(p.grad.any()) for p in model.critic.encoder.parameters())


def test_it_trains_in_worker_processes_checkpoints_what_it_learned_and_resumes(tmp_path):
    # input normalisation on: its statistics must take every fresh step, however many learner steps old (SAC reads
    # no --max_policy_lag: given, it is refused)
    cfg = _cfg(tmp_path, normalize_input=True)
    result = run_training(cfg)
    assert result["status"] == "done" and result["env_steps"] >= 640
    stats = result["train_stats"][0]
    assert {"loss/critic", "loss/actor", "loss/alpha", "q1_mean", "q2_mean", "alpha", "entropy", "replay/fill",
            "replay/age_mean", "replay/updates_per_step"} <= set(stats)
    assert stats["replay/updates_per_step"] == pytest.approx(0.25, rel=0.1)
    ckpt = load_latest_checkpoint(cfg, 0)
    assert {"actor_optimizer", "critic_optimizer", "alpha_optimizer", "target_critic", "log_alpha"} <= set(ckpt)
    assert any(k.startswith("critic.q1.") for k in ckpt["model"]) and ckpt["train_step"] > 0
    assert float(ckpt["log_alpha"]) != 0.0
    assert float(ckpt["model"]["preprocessor.obs_normalizer.count"]) >= 600
    saved = json.loads((tmp_path / "sac" / "cfg.json").read_text())
    assert saved["algo"] == "SAC" and saved["tau"] == 0.005 and "ppo_epochs" not in saved
    again = run_training(_cfg(tmp_path, normalize_input=True, train_for_env_steps=960))
    assert again["status"] == "done" and again["env_steps"] >= 960
    later = load_latest_checkpoint(cfg, 0)
    assert later["train_step"] > ckpt["train_step"]
    # the resumed learner started from the saved target copies and temperature, not afresh
    assert not torch.equal(later["target_critic"]["q1.out.weight"], ckpt["target_critic"]["q1.out.weight"])
    assert later["actor_optimizer"]["state"][0]["step"] > ckpt["actor_optimizer"]["state"][0]["step"]


def test_the_paper_s_defaults_and_the_bad_inputs_are_one_clear_line(tmp_path):
    cfg = default_cfg(env="gym_Pendulum-v1", algo="SAC")
    assert (cfg.gamma, cfg.tau, cfg.batch_size, cfg.n_step, cfg.replay_ratio, cfg.sac_alpha, cfg.use_rnn) == \
           (0.99, 0.005, 256, 1, 256.0, None, False)
    assert (cfg.actor_learning_rate, cfg.critic_learning_rate, cfg.alpha_learning_rate) == (3e-4, 3e-4, 3e-4)
    for flags, message in [({"replay_ratio": 0.0}, r"--replay_ratio=0.0 must be a finite number > 0"),
                           ({"replay_ratio": -1.0}, r"--replay_ratio=-1.0 must be"),
                           ({"tau": 1.5}, r"--tau=1.5 must be in \[0, 1\]"),
                           ({"n_step": 0}, r"--n_step=0 must be an integer >= 1")]:
        with pytest.raises(ConfigError, match=message) as e:
            _cfg(tmp_path, **flags)
        assert "\n" not in str(e.value)
    cases = [(dict(env="gym_CartPole-v1", experiment="discrete"),
              r"--algo=SAC needs a 1-D Box action space .* Discrete\(2\): use --algo=APPO or --algo=R2D2"),
             (dict(experiment="huge", replay_buffer_size=10 ** 12),
              r"--replay_buffer_size=1000000000000 transitions need [\d,]+ MiB of memory"),
             (dict(experiment="rnn", use_rnn=True, recurrence=16),
              r"--use_rnn=True is not supported by --algo=SAC .*; allowed: --use_rnn=False")]
    for flags, message in cases:
        with pytest.raises(ConfigError, match=message) as e:
            run_training(_cfg(tmp_path, **flags))
        assert "\n" not in str(e.value)
        assert not (tmp_path / flags["experiment"] / "cfg.json").exists()


def test_the_exported_graph_gives_the_squashed_mean_action(tmp_path):
    from sfx.models.export import export_model
    from tests.test_export import onnx_runner

    cfg = _cfg(tmp_path)
    model = SACModel(cfg, gymnasium.spaces.Box(-5, 5, (4,)), gymnasium.spaces.Box(-2.0, 3.0, (2,))).eval()
    rule = SAC.acting_rule(cfg, model.action_space)
    spec = export_model(model, tmp_path / "actor.onnx", "onnx", rule=rule)
    assert [o["name"] for o in spec["outputs"]][:3] == ["actions", "action_mean", "action_log_std"]
    run = onnx_runner(tmp_path / "actor.onnx", spec)
    obs, h = torch.randn(5, 4), model.initial_rnn_states(5)
    got = run({"obs": obs.numpy(), "rnn_states": h.numpy()})
    with torch.no_grad():
        ref = rule.act(model.forward_step(obs, h), deterministic=True).actions
    assert torch.allclose(torch.from_numpy(got["actions"]), ref, atol=1e-5)


@pytest.mark.parametrize("nan_at", [None, (1, 2)])
def test_two_ranks_agree_on_the_steps_average_their_gradients_and_keep_equal_weights(tmp_path, nan_at):
    """Each rank keeps its own replay; rank 0 inserts 32 transitions (16 steps due at a ratio of .5), rank 1
    16 (8 due): both take the mean, 12, and carry the difference in their credit. Every step averages the
    ranks' gradients, so the weights, target critics and temperature stay equal, and differ from rank 0
    learning alone on its own data; a non-finite minibatch on one rank skips that step on both."""
    import torch.multiprocessing as mp

    from tests.agents.sac_ranks import rank_data, rank_main, sac_setup, train_once

    mp.spawn(rank_main, args=(2, str(tmp_path / "rendezvous"), str(tmp_path), [4, 2], nan_at), nprocs=2, join=True)
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in range(2))
    assert r0["steps"] == r1["steps"] == 12
    assert (r0["credit"], r1["credit"]) == (4.0 * 16, -4.0 * 16)  # in trained transitions, minibatches of 16
    assert r0["skipped"] == r1["skipped"] == ([] if nan_at is None else [2])
    for key in ("model", "target"):
        for name, value in r0[key].items():
            assert torch.equal(value, r1[key][name]), (key, name)
    assert torch.equal(r0["log_alpha"], r1["log_alpha"])
    _, alone, store = sac_setup(str(tmp_path), 0)
    store.credit = -4.0 * 16  # 12 steps, as the ranks took
    assert train_once(alone, store, rank_data(0, 4))[0] == 12
    assert not torch.equal(alone.model.state_dict()["actor.out.weight"], r0["model"]["actor.out.weight"])
