"""Evaluation during training: an evaluator component and the coordinator part that schedules it.

Every ``--eval_every_env_steps`` env steps of a policy, the coordinator's
:class:`~sfx.engine.evaluation.EvaluationPart` asks
the evaluator (its own process, one more component; serially in ``--serial_mode``) to evaluate that
policy: it takes the policy's newest published weights (the same seqlocked buffer policy workers
read), plays ``--eval_episodes`` episodes on ``--eval_env`` (default: the training env) with
``--eval_num_envs`` envs, sampling or (``--eval_deterministic``) taking the most likely action, and
reports the mean reward and length, per-task rewards where the env has tasks, and the version of the
weights it played. The part writes them to TensorBoard (``eval/reward``, ``eval/len``,
``eval/policy_version``, ``eval/episodes``, ``eval/sec``, ``eval/task/<name>/reward``).

Training never waits for it: the part sends a request only while the evaluator is idle, and an
evaluation that falls due while one runs is skipped and counted (``eval/skipped``, logged). The
evaluator's share of the machine is its envs (``--eval_num_envs``) and one thread.

With ``--save_best_metric=eval/reward`` the evaluator keeps ``checkpoint_p{N}/best/best.pth``: the
weights it evaluated whenever they beat the best score so far (written atomically; the score is in the
file, so a resumed run keeps beating the old best, not a fresh one). ``sfx.enjoy
--load_checkpoint_kind=best`` plays it.

Episodes are spread evenly over the envs (each plays its share, then sits out), so short episodes are
not over-represented; each evaluation re-seeds its envs (seeded runs: the same starts every time the
same evaluation index comes round).

With ``--eval_video_every=K`` every K-th evaluation (the first included) also records its first
env's first episode (the env made with ``render_mode="rgb_array"``; at most
``--eval_video_max_frames`` frames) and the part writes it to TensorBoard as ``eval/video``: an
animated GIF in the Images tab (:mod:`sfx.experiment.videos`). An env that cannot render turns the
videos off with one warning; the evaluations go on.
"""

from __future__ import annotations

import copy
import logging
import math
import shlex
import time
from typing import Any

import numpy as np
import torch

from sfx.engine.component import Component
from sfx.engine.protocol import EVAL_RESULT, EVALUATE
from sfx.experiment.videos import as_rgb_frame, gif_bytes, render_fps

log = logging.getLogger(__name__)

EVALUATOR = "evaluator_0"
EVAL_SEED_STRIDE = 10_007  # an evaluation's env seeds move on by this much from the previous one's


def eval_env_overrides(cfg: Any) -> dict[str, Any]:
    """``--eval_env_flags`` as ``{flag's dest: value}``: the flags it gives, parsed with the eval env's family's own
    flags (``--eval_env``'s family, else ``--env``'s) and nothing else, so a trainer flag (``--env_frameskip``,
    which would change what an action means) or a misspelt one is refused. ``{}`` when it is None or empty.

    Raises:
        ConfigError: in one line, naming ``--eval_env_flags``, for a flag the family does not have, a bad value,
            or a string that does not split into arguments.
    """
    from sfx.cfg.parsing import ArgParser, explicit_flags
    from sfx.envs.registry import find_family
    from sfx.errors import ConfigError

    text = cfg.eval_env_flags
    if not text or not text.strip():
        return {}
    where = f"--eval_env_flags={text!r}"
    try:
        argv = shlex.split(text)
    except ValueError as e:
        raise ConfigError(f"{where} does not split into arguments ({e}); give flags as on a command line, e.g. "
                          f"--eval_env_flags='--procgen_num_levels=0'") from None
    env = cfg.eval_env or cfg.env
    family = find_family(env)
    # the family's flags alone: the evaluator's envs may differ from the training envs in env settings only
    parser = ArgParser(prog="--eval_env_flags", add_help=False, allow_abbrev=False)
    if family.add_params_fn is not None:
        family.add_params_fn(parser)
    allowed = sorted(s for a in parser._actions for s in a.option_strings)
    if not allowed:
        raise ConfigError(f"{where}: the {family.prefix} family (--env={env}) has no env flags of its own to set")
    try:
        values, unknown = parser.parse_known_args(argv)
        given = explicit_flags(parser, argv)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    if unknown:
        raise ConfigError(f"{where}: {unknown[0]!r} is not a flag of the {family.prefix} family (--env={env}); "
                          f"allowed: {', '.join(allowed)}")
    return {name: getattr(values, name) for name in sorted(given)}


def eval_cfg(cfg: Any) -> Any:
    """The cfg the evaluator makes its envs from: ``--eval_env`` in place of ``--env`` (when given), and the env flags
    ``--eval_env_flags`` gives over the run's (:func:`eval_env_overrides`)."""
    out = copy.copy(cfg)
    if cfg.eval_env:
        out.env = cfg.eval_env
    for name, value in eval_env_overrides(cfg).items():
        setattr(out, name, value)
    return out


def eval_env_config(cfg: Any, i: int) -> dict:
    """Env ``i`` of the evaluator: ids after every rollout worker's (seeds and ports of its own)."""
    return {"worker_index": cfg.num_workers, "vector_index": i,
            "env_id": cfg.num_workers * cfg.num_envs_per_worker + i}


class Evaluator(Component):
    """Plays evaluation episodes with a policy's newest weights. Messages in: ``EVALUATE`` on its inbox.
    Out: ``EVAL_RESULT`` reports. A component (start / process / tick / finish)."""

    def __init__(self, cfg: Any, weights: list, env_info: Any, report_queue: Any, device: torch.device,
                 make_env_fn: Any = None, agent: Any = None) -> None:
        """``agent``: the run's agent class (its model and acting rule); None = ``cfg.algo``'s."""
        from sfx.agents import find_agent

        self.agent = agent if agent is not None else find_agent(cfg.algo)
        self.cfg = cfg
        self.weights = weights
        self.env_info = env_info
        self.report_queue = report_queue
        self.device = device
        self.make_env_fn = make_env_fn
        self.envs: list = []
        self.evaluations = 0
        self.best: dict[int, float] = {}
        self.video_every = int(cfg.eval_video_every)

    def start(self) -> None:
        from sfx.envs import make_env
        from sfx.experiment import best_checkpoint_path, load_checkpoint

        cfg = eval_cfg(self.cfg)
        make = self.make_env_fn or make_env
        # the first env renders frames when videos are on (rendering only while one is recorded)
        self.envs = [make(cfg, eval_env_config(self.cfg, i), **({"render_mode": "rgb_array"}
                                                                 if i == 0 and self.video_every > 0 else {}))
                     for i in range(self.cfg.eval_num_envs)]
        info = self.env_info
        self.model = self.agent.make_model(self.cfg, info.observation_space, info.action_space,
                                           info.num_tasks).to(self.device).for_inference()
        self.rule = self.agent.acting_rule(self.cfg, info.action_space)
        self.versions = [-1] * len(self.weights)
        if self.cfg.save_best_metric != "none":
            for p in range(len(self.weights)):
                path = best_checkpoint_path(self.cfg, p)
                if path.is_file():
                    try:
                        self.best[p] = float(load_checkpoint(path)["value"])
                    except Exception as e:  # noqa: BLE001 - a damaged best file is replaced by the next best
                        log.warning("best checkpoint %s cannot be read (%s): the next evaluation replaces it", path, e)

    def process(self, msgs: list) -> None:
        for kind, payload in msgs:
            if kind != EVALUATE:
                raise ValueError(f"evaluator got unknown message {kind!r}")
            self.evaluate(int(payload["policy"]), int(payload["env_steps"]))

    def evaluate(self, policy: int, env_steps: int) -> dict | None:
        """One evaluation of ``policy`` (reported; also returned). None when the run stopped meanwhile."""
        from sfx.algo.distributions import action_to_env
        from sfx.envs.vector import env_task_id
        from sfx.envs.registry import env_seed
        from sfx.agents.acting import AgentsActing
        from sfx.models.obs import stack_obs

        t0 = time.time()
        version = self.weights[policy].read_into(self.model, self.versions[policy])
        self.versions[policy] = version
        cfg, n_envs, nap = self.cfg, len(self.envs), self.env_info.num_agents
        quota = [cfg.eval_episodes // n_envs + (1 if i < cfg.eval_episodes % n_envs else 0) for i in range(n_envs)]
        acting = AgentsActing(self.model, self.rule, n_envs * nap, self.device, cfg.eval_deterministic)
        obs = []
        for i, env in enumerate(self.envs):
            seed = env_seed(cfg, eval_env_config(cfg, i))
            o, _ = env.reset(seed=None if seed is None else seed + EVAL_SEED_STRIDE * self.evaluations)
            obs.append(o)
        # this evaluation records env 0's first episode (agent 0's; every agent shares the env's picture)
        frames: list[np.ndarray] = []
        recording = self.video_every > 0 and self.evaluations % self.video_every == 0 and self._record(frames)
        self.evaluations += 1
        space = self.envs[0].observation_space
        rewards: list[float] = []
        lengths: list[int] = []
        task_rewards: dict[str, list[float]] = {}
        running = np.zeros((n_envs, nap))
        running_len = np.zeros((n_envs, nap), dtype=np.int64)
        names = self.env_info.task_names
        while sum(quota) > 0:
            if self.should_stop():
                return None
            actions, _ = acting.act(stack_obs([o for env_obs in obs for o in env_obs], space))
            step_rewards = np.zeros(n_envs * nap, dtype=np.float32)
            dones = np.zeros(n_envs * nap, dtype=bool)
            for i, env in enumerate(self.envs):
                if quota[i] <= 0:
                    continue  # played its share: it sits out
                rows = range(i * nap, (i + 1) * nap)
                o, r, term, trunc, infos = env.step([action_to_env(env.action_space, actions[a]) for a in rows])
                obs[i] = o
                if i == 0 and recording:
                    # the env resets itself: the frame after the episode's last step is the next one's first
                    recording = (not (term[0] or trunc[0]) and len(frames) < cfg.eval_video_max_frames
                                 and self._record(frames))
                for j in range(nap):
                    a = i * nap + j
                    step_rewards[a], dones[a] = r[j], bool(term[j] or trunc[j])
                    running[i, j] += float(r[j])
                    running_len[i, j] += 1
                    if not dones[a] or quota[i] <= 0:
                        continue
                    stats = (infos[j] or {}).get("episode") or {}
                    rewards.append(float(stats.get("reward", running[i, j])))
                    lengths.append(int(stats.get("len", running_len[i, j])))
                    if len(names) > 1:
                        task_rewards.setdefault(names[env_task_id(env)], []).append(rewards[-1])
                    running[i, j], running_len[i, j] = 0.0, 0
                    quota[i] -= 1
            acting.observe(step_rewards, dones)
        result = {"env_steps": env_steps, "policy_version": version, "episodes": len(rewards),
                  "reward": float(np.mean(rewards)), "len": float(np.mean(lengths)),
                  "tasks": {k: float(np.mean(v)) for k, v in task_rewards.items()},
                  "sec": time.time() - t0, "best": False}
        video = self._encode(frames) if frames else None
        if video is not None:
            result["video"] = video
        if cfg.save_best_metric == "eval/reward" and result["reward"] > self.best.get(policy, -math.inf):
            result["best"] = self._save_best(policy, result)
        self.report_queue.put((EVAL_RESULT, policy, result))
        return result

    def _record(self, frames: list) -> bool:
        """Appends env 0's current picture to ``frames``. An env that cannot render: ``frames`` emptied,
        videos off for the rest of the run (one warning), False."""
        try:
            frame = self.envs[0].render()
            if frame is None:
                raise ValueError("render() returned None")
            frames.append(as_rgb_frame(frame))
            return True
        except Exception as e:  # noqa: BLE001 - a video is a nice-to-have: never stop evaluating for it
            log.warning("--eval_video_every=%d: %s cannot render rgb_array frames (%s: %s); evaluation videos are "
                        "off for this run", self.video_every, self.cfg.eval_env or self.cfg.env, type(e).__name__, e)
            self.video_every = 0
            frames.clear()
            return False

    def _encode(self, frames: list) -> dict | None:
        try:
            gif, height, width = gif_bytes(frames, render_fps(self.envs[0]))
        except Exception as e:  # noqa: BLE001 - as in _record: the evaluation's figures matter more
            log.warning("an evaluation video could not be encoded (%s: %s); evaluation videos are off for this run",
                        type(e).__name__, e)
            self.video_every = 0
            return None
        return {"gif": gif, "height": height, "width": width, "frames": len(frames)}

    def _save_best(self, policy: int, result: dict) -> bool:
        from sfx.experiment import cfg_to_dict, save_best_checkpoint

        state = {"model": self.model.state_dict(), "train_step": result["policy_version"],
                 "policy_version": result["policy_version"], "env_steps": result["env_steps"],
                 "metric": self.cfg.save_best_metric, "value": result["reward"], "cfg": cfg_to_dict(self.cfg)}
        try:
            save_best_checkpoint(self.cfg, policy, state)
        except OSError as e:
            log.error("policy %d: the best checkpoint (eval/reward %.3f) could not be saved: %s; the previous best is "
                      "intact", policy, result["reward"], e.strerror or e)
            return False
        self.best[policy] = result["reward"]
        return True

    def finish(self) -> None:
        for env in self.envs:
            try:
                env.close()
            except Exception:  # closing must not hide the real shutdown
                log.exception("evaluator env close failed")
        self.envs = []
