"""``python -m sfx.enjoy --experiment=...``: watch, score or record a trained policy.

The experiment's ``cfg.json`` (which names its ``--env``: give ``--env`` only to play another env) and
newest checkpoint of ``--policy_index`` are loaded, then every
agent of the env plays with that policy until ``--max_num_episodes`` episodes (counted per agent)
or ``--max_num_frames`` frames (agent steps times ``--env_frameskip``, as training counts
``env_steps``) have been played. One line is printed per finished episode, then the mean and
spread of the episode rewards, and the results go to ``<train_dir>/<experiment>/eval_results_p<policy>.json``
(see :mod:`sfx.experiment.results`).

Many experiments (seeds, tasks) at once, ending with the aggregate table (``sfx.tb`` starts one
``python -m sfx.enjoy`` per experiment)::

    python -m sfx.tb evaluate 'my_run/*' --max_num_episodes=20

- By default the env renders to a window (``render_mode='human'``); ``--no_render`` plays headless.
- ``--save_video`` renders ``rgb_array`` frames and writes them to an mp4 (imageio with the ffmpeg
  binary that the imageio-ffmpeg package ships) to ``<experiment folder>/<--video_name>``
  (default ``replay.mp4``; an absolute ``--video_name`` is used as it is).
- ``--deterministic`` plays the distribution's mode instead of sampling from it.

Envs reset themselves, so a video shows an episode's very last state only as the first frame of
the next episode.

Ctrl+C stops early and still prints the summary of the episodes finished so far.
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sfx.cfg import ConfigError, add_eval_args
from sfx.registries import parse_args
from sfx.cfg.threads import acting_threads

MAX_VIDEO_FRAMES = 10**9  # frames past this are not written (a guard against filling the disk)


def _with_eval_flags(cfg: Any) -> Any:
    """``cfg`` with every evaluation flag. A training cfg handed to :func:`enjoy` lacks them: a copy
    gets their parser defaults (``add_eval_args`` is their one home); a cfg parsed with
    ``evaluation=True`` comes back as it is."""
    parser = argparse.ArgumentParser(add_help=False)
    add_eval_args(parser)
    missing = {k: v for k, v in vars(parser.parse_args([])).items() if not hasattr(cfg, k)}
    if not missing:
        return cfg
    cfg = copy.copy(cfg)
    for key, value in missing.items():
        setattr(cfg, key, value)
    return cfg


def _make_env(cfg: Any, render_mode: str | None) -> Any:
    from sfx.envs import make_env

    env_config = {"worker_index": 0, "vector_index": 0, "env_id": 0}
    try:
        return make_env(cfg, env_config, render_mode=render_mode)
    except ImportError as e:  # gymnasium's DependencyNotInstalled is an ImportError too
        if render_mode != "human":
            raise
        raise ConfigError(f"cannot open a window to render {cfg.env!r} ({e}); "
                          f"pass --no_render to play headless or --save_video to record an mp4") from e


class _VideoWriter:
    """Streams frames to an mp4 so long evaluations do not hold every frame in memory."""

    def __init__(self, path: Path, fps: float, max_frames: int) -> None:
        import imageio.v2 as imageio

        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.max_frames = max_frames
        self.num_frames = 0
        # macro_block_size=2: H.264 in yuv420p needs even sides; 16 (imageio's default) would
        # rescale most env frames, e.g. CartPole's 600x400
        self._writer = imageio.get_writer(str(path), fps=fps, codec="libx264", macro_block_size=2,
                                          ffmpeg_log_level="error")

    def add(self, frame: Any) -> None:
        if frame is None or self.num_frames >= self.max_frames:
            return
        frame = np.asarray(frame)
        if frame.dtype != np.uint8:
            frame = np.clip(frame, 0, 255).astype(np.uint8)
        self._writer.append_data(frame)
        self.num_frames += 1

    def close(self) -> None:
        self._writer.close()


def _render(env: Any, cfg: Any) -> Any:
    try:
        return env.render()
    except ImportError as e:  # e.g. gymnasium's classic-control envs draw with pygame
        raise ConfigError(f"cannot render frames of {cfg.env!r} for --save_video: {e}") from e


def _video_fps(cfg: Any, env: Any) -> float:
    from sfx.experiment.videos import render_fps

    return float(cfg.fps) if cfg.fps > 0 else render_fps(env)


def enjoy(cfg: Any) -> dict:
    """Play the newest checkpoint of ``cfg.policy_index`` in ``cfg.env``; see the module docstring.

    ``cfg``: parsed with ``evaluation=True``, or a training cfg (its evaluation flags then take their
    defaults).

    Returns a dict: ``episodes`` (count), ``rewards`` and ``lengths`` (per finished episode, in
    order), ``mean_reward`` and ``std_reward`` (nan when no episode finished), ``frames``
    (agent steps times env_frameskip), ``video_path`` (str or None), ``interrupted`` (Ctrl+C),
    ``checkpoint`` (the file played), ``env_steps`` (its training's env steps) and ``results_path``: the
    JSON results file written (:mod:`sfx.experiment.results`, read by ``python -m sfx.tb table --eval``).
    Raises :class:`~sfx.cfg.ConfigError` when the experiment has no checkpoint. Torch runs on
    ``ACTING_THREADS`` threads meanwhile (:func:`sfx.cfg.threads.acting_threads`).
    """
    with acting_threads():
        return _enjoy(_with_eval_flags(cfg))


def _enjoy(cfg: Any) -> dict:
    from sfx.agents import find_agent
    from sfx.agents.acting import AgentsActing
    from sfx.engine.wiring import resolve_device
    from sfx.experiment import experiment_dir, load_policy_checkpoint
    from sfx.experiment.results import write_results

    policy_id = int(cfg.policy_index)
    # the checkpoint is checked before the env is made: a missing one is the common mistake and
    # some envs are slow to start
    checkpoint, checkpoint_file = load_policy_checkpoint(cfg, policy_id)
    if cfg.load_checkpoint_kind == "best":
        print(f"playing the best checkpoint: {checkpoint['metric']} {checkpoint['value']:.3f} at "
              f"{checkpoint['env_steps']:,} env steps", flush=True)

    render_mode = "rgb_array" if cfg.save_video else (None if cfg.no_render else "human")
    env = _make_env(cfg, render_mode)
    video = None
    try:
        device = resolve_device(cfg, warn=True)
        agent = find_agent(cfg.algo)
        model = _trained_model(cfg, agent, env, checkpoint, device)
        if cfg.seed is not None:
            torch.manual_seed(int(cfg.seed))
        if cfg.save_video:
            video_path = experiment_dir(cfg) / (cfg.video_name or "replay.mp4")  # absolute names win
            video = _VideoWriter(video_path, _video_fps(cfg, env), MAX_VIDEO_FRAMES)
        obs = _reset(cfg, env, video)
        # each agent's core state, memory and previous action / reward, kept as the engine keeps them
        agents = AgentsActing(model, agent.acting_rule(cfg, env.action_space), env.num_agents, device,
                              bool(cfg.deterministic))
        episodes = _Episodes(env.num_agents, int(cfg.max_num_episodes))
        frame_sec = 1.0 / float(cfg.fps) if render_mode == "human" and cfg.fps > 0 else 0.0
        frames, interrupted = _play(cfg, env, obs, agents, episodes, video, frame_sec)
    finally:
        if video is not None:
            video.close()
        env.close()

    rewards = episodes.rewards
    mean = float(np.mean(rewards)) if rewards else math.nan
    std = float(np.std(rewards)) if rewards else math.nan
    print(f"mean reward {mean:.3f} ± {std:.3f} over {len(rewards)} episodes", flush=True)
    if video is not None:
        print(f"video: {video.path} ({video.num_frames} frames)", flush=True)
    played = {
        "episodes": len(rewards),
        "rewards": rewards,
        "lengths": episodes.lengths,
        "mean_reward": mean,
        "std_reward": std,
        "frames": frames,
        "video_path": str(video.path) if video is not None else None,
        "interrupted": interrupted,
        "checkpoint": str(checkpoint_file),
        "env_steps": int(checkpoint.get("env_steps", 0)),
    }
    played["results_path"] = str(write_results(cfg, policy_id, played, checkpoint, checkpoint_file))
    print(f"results: {played['results_path']}", flush=True)
    return played


def _trained_model(cfg: Any, agent: Any, env: Any, checkpoint: dict, device: torch.device) -> torch.nn.Module:
    """``agent``'s model for ``env``'s spaces with the checkpoint's weights, on ``device``, ready to act."""
    model = agent.make_model(cfg, env.observation_space, env.action_space,
                             max(1, len(getattr(env, "task_names", None) or ())))
    model.load_state_dict(checkpoint["model"])
    model.to(device).for_inference()
    return model


def _reset(cfg: Any, env: Any, video: _VideoWriter | None) -> Any:
    """The env's first observations (seeded with ``--seed``), the first frame into the video."""
    try:
        obs, _ = env.reset(seed=cfg.seed)
    except ImportError as e:  # a "human" env draws its window from reset on
        raise ConfigError(f"cannot render {cfg.env!r} ({e}); pass --no_render to play headless") from e
    if video is not None:
        video.add(_render(env, cfg))
    return obs


class _Episodes:
    """Each agent's running reward and length; every finished episode's, printed as it ends."""

    def __init__(self, num_agents: int, max_episodes: int) -> None:
        self.num_agents = num_agents
        self.max_episodes = max_episodes
        self.running_reward = np.zeros(num_agents, dtype=np.float64)
        self.running_len = np.zeros(num_agents, dtype=np.int64)
        self.rewards: list[float] = []
        self.lengths: list[int] = []

    @property
    def enough(self) -> bool:
        return len(self.rewards) >= self.max_episodes

    def add_step(self, step_rewards: Any, terminated: Any, truncated: Any, infos: Any) -> None:
        """One env step of every agent; stops counting once ``max_episodes`` episodes have ended."""
        for i in range(self.num_agents):
            self.running_reward[i] += float(step_rewards[i])
            self.running_len[i] += 1
            if not (terminated[i] or truncated[i]):
                continue
            # the env's episode stats carry the raw reward even when wrappers rescale it
            stats = (infos[i] or {}).get("episode") or {}
            reward = float(stats.get("reward", self.running_reward[i]))
            length = int(stats.get("len", self.running_len[i]))
            self.rewards.append(reward)
            self.lengths.append(length)
            who = f" agent {i}" if self.num_agents > 1 else ""
            print(f"episode {len(self.rewards)}{who}: reward {reward:.3f}, length {length}", flush=True)
            self.running_reward[i] = 0.0
            self.running_len[i] = 0
            if self.enough:
                break


def _play(cfg: Any, env: Any, obs: Any, agents: Any, episodes: _Episodes, video: _VideoWriter | None,
          frame_sec: float) -> tuple[int, bool]:
    """Play from ``obs`` until ``episodes`` has enough or ``--max_num_frames`` frames are played, each step taking
    at least ``frame_sec`` (a window's ``--fps``); Ctrl+C ends it early. Returns the frames played and whether
    Ctrl+C ended it."""
    from sfx.algo.distributions import action_to_env
    from sfx.models.obs import stack_obs

    max_frames = int(cfg.max_num_frames)
    frameskip = max(1, int(cfg.env_frameskip))
    action_space, num_agents = env.action_space, env.num_agents
    frames = 0
    try:
        while not episodes.enough and frames < max_frames:
            step_start = time.monotonic()
            actions_np, _ = agents.act(stack_obs(obs, env.observation_space))
            env_actions = [action_to_env(action_space, actions_np[i]) for i in range(num_agents)]
            obs, step_rewards, terminated, truncated, infos = env.step(env_actions)
            frames += num_agents * frameskip
            if video is not None:
                video.add(_render(env, cfg))
            # the env auto-reset: an agent whose episode ended starts the next one from a fresh state
            agents.observe(step_rewards, [bool(a or b) for a, b in zip(terminated, truncated)])
            episodes.add_step(step_rewards, terminated, truncated, infos)
            if frame_sec:
                time.sleep(max(0.0, frame_sec - (time.monotonic() - step_start)))
    except KeyboardInterrupt:
        print("interrupted: summary of the episodes finished so far", flush=True)
        return frames, True
    return frames, False


# sfx.enjoy's on/off flags written without a value (``--no_render``)
SWITCHES = ("no_render", "save_video", "deterministic")


def evaluate(env: str, experiment: str, **flags: Any) -> dict:
    """Evaluate as ``python -m sfx.enjoy --env=ENV --experiment=EXPERIMENT --flag=value ...`` would (the same
    flags, defaults and validation: a bad value raises :class:`~sfx.errors.ConfigError`, worded in keyword
    terms), except that no
    window opens unless ``no_render=False`` is given. Returns :func:`enjoy`'s dict (``episodes``,
    ``rewards``, ``lengths``, ``mean_reward``, ``std_reward``, ``frames``, ``video_path``, ``interrupted``,
    ``checkpoint``, ``env_steps``, ``results_path``: the JSON results file it wrote).

    Example::

        import sfx
        scores = sfx.evaluate(env="gym_CartPole-v1", experiment="cartpole", max_num_episodes=20)
    """
    from sfx.cfg.cfg_json import flags_to_argv

    from sfx.cfg.api_terms import in_python_terms

    flags = {"no_render": True, **flags}
    switches = [f"--{name}" for name in SWITCHES if flags.pop(name, False)]
    try:
        cfg = parse_args([f"--env={env}", f"--experiment={experiment}", *switches, *flags_to_argv(flags)],
                         evaluation=True)
        return enjoy(cfg)
    except ConfigError as e:
        raise in_python_terms(e, "sfx.evaluate", "python -m sfx.enjoy") from None


def main(argv: list[str] | None = None) -> int:
    try:
        cfg = parse_args(argv, evaluation=True)
        enjoy(cfg)
    except ConfigError as e:
        print(f"sfx: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
