"""sfx.enjoy: scoring, stopping, video, multi-agent bookkeeping and the missing-checkpoint error.

The checkpoints are an untrained model saved the way the learner saves them: enjoy's job is to
load and play whatever is there, so no training is needed (and none would keep these tests fast).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch

from sfx import enjoy as enjoy_module
from sfx.cfg import ConfigError
from sfx.registries import parse_args
from sfx.cfg.threads import ACTING_THREADS
from sfx.envs import MultiAgentEnv, register_env_family, unregister_env_family
from sfx.models import create_actor_critic
from tests.untrained_experiment import write_untrained_experiment

CARTPOLE = "gym_CartPole-v1"
EPISODE_RE = re.compile(r"^episode (\d+)(?: agent (\d+))?: reward ([-\d.]+), length (\d+)$", re.M)
SUMMARY_RE = re.compile(r"^mean reward ([-\d.naN]+) ± ([-\d.naN]+) over (\d+) episodes$", re.M)


def make_experiment(train_dir: Path, env: str = CARTPOLE, *flags: str, checkpoint: bool = True) -> list[str]:
    """An experiment folder as training leaves it (cfg.json + one checkpoint of an untrained model).

    Returns the flags that point sfx.enjoy at it.
    """
    return [f"--env={env}", *write_untrained_experiment(train_dir, env, "enjoy_test", *flags, checkpoint=checkpoint)]


def run_enjoy(argv: list[str]) -> dict:
    return enjoy_module.enjoy(parse_args(argv, evaluation=True))


def test_plays_the_requested_episodes_and_prints_their_mean(tmp_path, capsys):
    where = make_experiment(tmp_path)
    assert enjoy_module.main([*where, "--no_render", "--max_num_episodes=3"]) == 0
    out = capsys.readouterr().out
    episodes = EPISODE_RE.findall(out)
    assert [int(e[0]) for e in episodes] == [1, 2, 3]
    rewards = [float(e[2]) for e in episodes]
    # CartPole pays 1 per step: the printed reward must be the env's, not something else
    assert rewards == [float(e[3]) for e in episodes]
    summary = SUMMARY_RE.search(out)
    assert summary is not None, out
    assert float(summary.group(1)) == pytest.approx(np.mean(rewards), abs=1e-3)
    assert float(summary.group(2)) == pytest.approx(np.std(rewards), abs=1e-3)
    assert int(summary.group(3)) == 3


def test_result_dict_matches_the_episodes(tmp_path):
    where = make_experiment(tmp_path)
    result = run_enjoy([*where, "--no_render", "--max_num_episodes=4"])
    assert result["episodes"] == 4
    assert result["rewards"] == [float(n) for n in result["lengths"]]
    assert result["mean_reward"] == pytest.approx(np.mean(result["rewards"]))
    assert result["std_reward"] == pytest.approx(np.std(result["rewards"]))
    assert result["frames"] == sum(result["lengths"])  # stopped right at the end of episode 4
    assert result["video_path"] is None and not result["interrupted"]


def test_max_num_frames_stops_mid_episode(tmp_path, capsys):
    where = make_experiment(tmp_path)
    # an untrained CartPole policy survives at least 8 steps, so 5 frames finish no episode
    result = run_enjoy([*where, "--no_render", "--max_num_episodes=100", "--max_num_frames=5"])
    assert result["frames"] == 5
    assert result["episodes"] == 0 and math.isnan(result["mean_reward"])
    assert "over 0 episodes" in capsys.readouterr().out


def test_deterministic_plays_the_mode(tmp_path, monkeypatch):
    """--deterministic: every action is the acting rule's mode (the one export traces), none is sampled."""
    where = make_experiment(tmp_path)
    import sfx.agents.appo.acting as appo  # enjoy acts through APPO's acting rule

    original, mode_actions = appo.make_action_distribution, appo.APPOActingRule.mode_actions
    calls = {"mode": 0}

    class NoSampling:
        def __init__(self, dist):
            self.dist = dist

        def sample(self):
            raise AssertionError("--deterministic must not sample")

        def log_prob(self, actions):
            return self.dist.log_prob(actions)

    def counting_mode(self, out):
        actions = mode_actions(self, out)
        calls["mode"] += actions.shape[0]
        assert torch.equal(actions.reshape(-1), original(self.action_space, out["action_params"]).mode().reshape(-1))
        return actions

    monkeypatch.setattr(appo, "make_action_distribution", lambda space, p: NoSampling(original(space, p)))
    monkeypatch.setattr(appo.APPOActingRule, "mode_actions", counting_mode)
    result = run_enjoy([*where, "--no_render", "--deterministic", "--max_num_episodes=2"])
    assert result["episodes"] == 2
    assert calls["mode"] == result["frames"]


def test_save_video_writes_every_frame_to_an_mp4(tmp_path):
    import imageio.v2 as imageio

    where = make_experiment(tmp_path)
    result = run_enjoy([*where, "--save_video", "--max_num_episodes=1"])
    path = Path(result["video_path"])
    assert path == tmp_path / "enjoy_test" / "replay.mp4"
    assert path.stat().st_size > 0
    reader = imageio.get_reader(str(path))
    try:
        frames = [f for f in reader]
    finally:
        reader.close()
    # the frame after reset, then one per step
    assert len(frames) == result["lengths"][0] + 1
    assert frames[0].shape == (400, 600, 3)


def test_video_name_is_inside_the_experiment_folder(tmp_path):
    where = make_experiment(tmp_path)
    result = run_enjoy([*where, "--save_video", "--video_name=clip.mp4", "--max_num_frames=10"])
    assert Path(result["video_path"]) == tmp_path / "enjoy_test" / "clip.mp4"
    assert Path(result["video_path"]).stat().st_size > 0


def test_missing_checkpoint_is_a_clear_error(tmp_path, capsys):
    where = make_experiment(tmp_path, checkpoint=False)
    assert enjoy_module.main([*where, "--no_render"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("sfx: error: no checkpoint in ")
    assert str(tmp_path / "enjoy_test" / "checkpoint_p0") in err
    assert "Traceback" not in err
    with pytest.raises(ConfigError, match="no checkpoint in"):
        run_enjoy([*where, "--no_render"])


def test_missing_experiment_is_a_clear_error(tmp_path, capsys):
    assert enjoy_module.main([f"--env={CARTPOLE}", "--experiment=nothing_here", f"--train_dir={tmp_path}"]) == 2
    assert capsys.readouterr().err.startswith("sfx: error: ")


# ------------------------------------------------------------------ multi-agent bookkeeping

class TwoClocksEnv(MultiAgentEnv):
    """Two agents whose episodes last 3 and 5 steps; reward 1 per step, observation = step count."""

    num_agents = 2
    observation_space = gymnasium.spaces.Box(-1e3, 1e3, (2,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)
    lengths = (3, 5)

    def __init__(self) -> None:
        self.t = [0, 0]
        self.returns = [0.0, 0.0]

    def _obs(self, i: int) -> np.ndarray:
        return np.array([self.t[i], i], dtype=np.float32)

    def reset(self, seed=None):
        self.t = [0, 0]
        return [self._obs(0), self._obs(1)], [{}, {}]

    def step(self, actions):
        assert len(actions) == 2 and all(a in (0, 1) for a in actions)
        obs, rewards, terminated, infos = [], [], [], []
        for i in range(2):
            self.t[i] += 1
            done = self.t[i] == self.lengths[i]
            info = {}
            if done:
                info = {"final_obs": self._obs(i), "episode": {"reward": float(self.t[i]), "len": self.t[i]}}
                self.t[i] = 0
            obs.append(self._obs(i))
            rewards.append(1.0)
            terminated.append(done)
            infos.append(info)
        return obs, rewards, terminated, [False, False], infos


@pytest.fixture
def two_clocks_family():
    register_env_family("enjoytest_", lambda name, cfg, env_config, render_mode=None: TwoClocksEnv())
    yield "enjoytest_clocks"
    unregister_env_family("enjoytest_")


def test_multi_agent_episodes_are_counted_per_agent_and_reset_the_rnn(tmp_path, capsys, monkeypatch,
                                                                       two_clocks_family):
    where = make_experiment(tmp_path, two_clocks_family, "--use_rnn=True")
    seen_states = []
    real_create = create_actor_critic

    def recording_create(*args, **kwargs):
        model = real_create(*args, **kwargs)
        forward_step = model.forward_step

        def recorded(obs, rnn_states):
            seen_states.append((obs["obs"].clone(), rnn_states.clone()))
            return forward_step(obs, rnn_states)

        model.forward_step = recorded
        return model

    import sfx.models

    monkeypatch.setattr(sfx.models, "create_actor_critic", recording_create)
    result = run_enjoy([*where, "--no_render", "--max_num_episodes=4"])
    # agent 0 ends at steps 3 and 6, agent 1 at step 5; the 4th episode is agent 0's at step 9
    assert result["rewards"] == [3.0, 5.0, 3.0, 3.0]
    assert result["frames"] == 2 * 9
    out = capsys.readouterr().out
    assert [(int(e[0]), int(e[1])) for e in EPISODE_RE.findall(out)] == [(1, 0), (2, 1), (3, 0), (4, 0)]

    for obs, states in seen_states:
        for agent in range(2):
            first_step = float(obs[agent, 0]) == 0.0
            # a new episode starts from a zero recurrent state, a running one carries it
            assert bool(torch.all(states[agent] == 0)) == first_step, (agent, obs, states)


def test_a_transformer_xl_agent_with_previous_action_and_reward_plays(tmp_path, monkeypatch):
    """enjoy keeps each agent's Transformer-XL memory and previous action / reward as the engine does:
    the memory's episode count grows step by step and restarts with every episode, and the previous
    action (choice + 1) and reward are zeros at an episode start."""
    from sfx.models.obs import PREV_ACTION_KEY, PREV_REWARD_KEY

    where = make_experiment(tmp_path, CARTPOLE, "--rnn_type=trxl", "--mem_len=4", "--n_layer=1", "--n_heads=2",
                            "--d_head=4", "--d_inner=16", "--use_prev_action_reward=True")
    seen = []

    import sfx.models

    real_create = sfx.models.create_actor_critic

    def recording_create(*args, **kwargs):
        model = real_create(*args, **kwargs)
        forward_step = model.forward_step

        def recorded(obs, rnn_states, tasks=None, memory=None):
            out = forward_step(obs, rnn_states, tasks, memory)
            seen.append((rnn_states[0, 0].item(), obs[PREV_ACTION_KEY][0, 0].item(), obs[PREV_REWARD_KEY][0, 0].item(),
                         memory is not None))
            return out

        model.forward_step = recorded
        return model

    monkeypatch.setattr(sfx.models, "create_actor_critic", recording_create)
    result = run_enjoy([*where, "--no_render", "--max_num_episodes=3", "--device=cpu"])
    assert len(result["rewards"]) == 3
    lengths = [int(x) for x in result["lengths"]]
    starts = np.cumsum([0] + lengths[:-1])
    assert all(s[3] for s in seen)
    for i, (valid, prev_action, prev_reward, _) in enumerate(seen[:sum(lengths)]):
        t = i - max(s for s in starts if s <= i)  # step within its episode
        assert valid == min(t, 4)
        assert (prev_action, prev_reward) == ((0.0, 0.0) if t == 0 else (prev_action, 1.0))
        assert t == 0 or prev_action in (1.0, 2.0)  # CartPole's two actions, stored + 1


def test_writes_the_results_file_the_tables_read(tmp_path):
    import json

    where = make_experiment(tmp_path)
    result = run_enjoy([*where, "--no_render", "--max_num_episodes=3", "--seed=5"])
    path = Path(result["results_path"])
    assert path == tmp_path / "enjoy_test" / "eval_results_p0.json"
    doc = json.loads(path.read_text())
    assert doc["format"] == "sfx.eval_results/1"
    assert doc["experiment"] == "enjoy_test" and doc["env"] == CARTPOLE and doc["policy_index"] == 0
    assert doc["episodes"] == 3 and doc["rewards"] == result["rewards"] and doc["lengths"] == result["lengths"]
    assert doc["mean_reward"] == pytest.approx(np.mean(doc["rewards"]))
    assert doc["std_reward"] == pytest.approx(np.std(doc["rewards"]))
    assert doc["mean_length"] == pytest.approx(np.mean(doc["lengths"]))
    assert Path(doc["checkpoint"]).is_file() and Path(doc["checkpoint"]).parent.name == "checkpoint_p0"
    assert doc["checkpoint"] == str(Path(result["checkpoint"]).resolve())
    assert doc["env_steps"] == result["env_steps"] and doc["checkpoint_kind"] == "latest"
    assert doc["cfg"]["env"] == CARTPOLE and doc["cfg"]["max_num_episodes"] == 3 and doc["seed"] == 5
    assert doc["interrupted"] is False and doc["frames"] == sum(doc["lengths"])


# ------------------------------------------------------------------ the first hour's frictions (issue 57)

def test_plays_on_one_torch_thread_as_the_policy_workers_do_and_gives_the_callers_back(tmp_path, monkeypatch):
    from sfx.agents.acting import AgentsActing

    where = make_experiment(tmp_path)
    seen = []
    act = AgentsActing.act

    def counting_act(self, *args, **kwargs):
        seen.append(torch.get_num_threads())
        return act(self, *args, **kwargs)

    monkeypatch.setattr(AgentsActing, "act", counting_act)
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # what torch picks on a 2-core machine: the cap must not depend on the host
    try:
        run_enjoy([*where, "--no_render", "--max_num_episodes=1"])
        assert seen and set(seen) == {ACTING_THREADS} == {1}
        assert torch.get_num_threads() == 2  # the caller's setting comes back (sfx.evaluate runs in its process)
    finally:
        torch.set_num_threads(before)


def test_export_traces_on_one_torch_thread(tmp_path, monkeypatch):
    from sfx import export as export_module
    import sfx.models.export as model_export

    where = make_experiment(tmp_path)
    seen = []
    real = model_export.export_model

    def recording_export(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(model_export, "export_model", recording_export)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        cfg = parse_args(where, evaluation=True)
        export_module.export(cfg, "torchscript")
        assert seen == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_env_comes_from_the_experiments_cfg_when_not_given(tmp_path, capsys):
    where = make_experiment(tmp_path)
    assert where[0] == f"--env={CARTPOLE}"
    assert enjoy_module.main([*where[1:], "--no_render", "--max_num_episodes=1"]) == 0
    assert len(EPISODE_RE.findall(capsys.readouterr().out)) == 1
    assert parse_args(where[1:], evaluation=True).env == CARTPOLE


def test_without_env_or_experiment_the_missing_folder_is_named(tmp_path, capsys):
    assert enjoy_module.main(["--experiment=nothing_here", f"--train_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sfx: error: no experiment at ") and str(tmp_path / "nothing_here") in err
    assert len(err.strip().splitlines()) == 1
