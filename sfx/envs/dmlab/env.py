"""One DeepMind Lab level as a gymnasium env: discrete actions, frame skip, uint8 CHW frames."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import gymnasium
import numpy as np

from sfx.errors import ConfigError
from sfx.envs.dmlab.actions import action_table
from sfx.envs.dmlab.instructions import InstructionTokenizer
from sfx.envs.dmlab.levels import HNS_CAP, human_normalized_score, level_path

INSTALL_HINT = (
    "DeepMind Lab has no pip package: build it from source with Bazel and install the wheel it makes "
    "(git clone https://github.com/google-deepmind/lab && cd lab && "
    "bazel build -c opt //python/pip_package:build_pip_package && "
    "./bazel-bin/python/pip_package/build_pip_package /tmp/dmlab_pkg && "
    "pip install /tmp/dmlab_pkg/deepmind_lab-*.whl; see "
    "https://github.com/google-deepmind/lab/blob/master/docs/users/build.md)"
)


def import_deepmind_lab(env_name: str = "dmlab_") -> ModuleType:
    """The ``deepmind_lab`` module, imported on first use; :class:`ConfigError` with install steps if missing."""
    try:
        return importlib.import_module("deepmind_lab")
    except ImportError as e:
        raise ConfigError(f"--env={env_name} needs DeepMind Lab's Python module deepmind_lab, which cannot be "
                          f"imported ({e}). {INSTALL_HINT}") from None


class DmLabEnv(gymnasium.Env):
    """A DeepMind Lab level with a discrete action set.

    Observations are the level's ``'RGB'`` frames, ``uint8 (3, height, width)``. Each step repeats
    the chosen action for ``frameskip`` frames inside DeepMind Lab (``Lab.step(..., num_steps=...)``,
    which renders only the last one) and returns the summed reward. Every episode ends
    ``terminated``: DeepMind Lab gives no observation after an episode's last frame, so there is
    nothing to bootstrap from, and levels do not tell a time limit from any other end.

    Info: ``info['instr']`` holds the level's instruction (language levels) on every step. On the
    last step of an episode ``info['episode_extra_stats']`` holds ``dmlab_raw_score`` (the
    episode return), for DMLab-30 levels ``dmlab_human_normalized_score`` and the per-level
    ``dmlab30/<level>/raw_score`` and ``.../hns``, and ``dmlab_target_objective`` (see
    :func:`target_objective`).

    Args:
        level: level name (``rooms_watermaze``; DMLab-30 names are looked up under contributed/dmlab30/).
        extended_action_set: the 15-action PopArt set instead of the 9-action IMPALA set.
        frameskip: frames per step (>= 1).
        width, height: frame size in pixels.
        renderer: ``'software'`` or ``'hardware'``.
        level_cache: an object with ``fetch(key, pk3_path)`` / ``write(key, pk3_path)``, or None.
        dataset_path: DeepMind Lab's ``datasetPath`` setting (image datasets of some psychlab levels).
        level_directory: DeepMind Lab's ``levelDirectory`` setting (custom level scripts).
        objective: ``'hns_capped'`` (dmlab_30) or ``'raw'`` (single levels), see :func:`target_objective`.
        render_mode: ``'rgb_array'`` (``render()`` returns an ``(H, W, 3)`` frame) or None.
        env_name: the ``--env`` name, for error messages.
        instructions: an :class:`InstructionTokenizer`: observations become a Dict of the frame
            (``"obs"``) and the tokenized instruction (``"instr"``, ``int32[max_len]``, all padding
            on levels without one); None: the frame alone.
    """

    metadata = {"render_modes": ["rgb_array", "human"], "render_fps": 15}

    def __init__(self, level: str, extended_action_set: bool = False, frameskip: int = 4, width: int = 96,
                 height: int = 72, renderer: str = "software", level_cache: Any = None,
                 dataset_path: str | None = None, level_directory: str | None = None, objective: str = "raw",
                 render_mode: str | None = None, env_name: str = "dmlab_",
                 instructions: InstructionTokenizer | None = None) -> None:
        if frameskip < 1:
            raise ValueError(f"frameskip must be >= 1, got {frameskip}")
        if render_mode not in (None, "rgb_array", "human"):
            raise ValueError(f"render_mode {render_mode!r} is not supported; use 'rgb_array', 'human' or None")
        lab_module = import_deepmind_lab(env_name)
        self.level = level
        self.frameskip = int(frameskip)
        self.objective = objective
        self.render_mode = render_mode
        # DeepMind Lab runs at 60 frames per second: that many agent steps per second of game time
        self.metadata = {**self.metadata, "render_fps": max(1, round(60 / self.frameskip))}
        self.actions = action_table(extended_action_set)
        frame_space = gymnasium.spaces.Box(0, 255, (3, height, width), np.uint8)
        self.frame_space = frame_space
        self.tokenizer = instructions
        if instructions is None:
            self.observation_space: gymnasium.Space = frame_space
        else:
            self.observation_space = gymnasium.spaces.Dict({
                "obs": frame_space,
                "instr": gymnasium.spaces.Box(0, instructions.vocab_size - 1, (instructions.max_len,), np.int32)})
        self.action_space = gymnasium.spaces.Discrete(len(self.actions))

        config = {"width": str(width), "height": str(height)}
        if dataset_path:
            config["datasetPath"] = str(dataset_path)
        if level_directory:
            config["levelDirectory"] = str(level_directory)
        # INSTR is in every level's observation spec (an empty string outside the language levels),
        # as IMPALA's DMLab-30 agent relies on
        self.lab = lab_module.Lab(level_path(level), ["RGB", "INSTR"], config=config, renderer=renderer,
                                  level_cache=level_cache)
        self.last_obs = np.zeros(frame_space.shape, np.uint8)
        self.instr = ""
        self._tokens: np.ndarray | None = None
        self.episode_return = 0.0

    def _read_obs(self) -> Any:
        obs = self.lab.observations()
        frame = obs["RGB"]
        if frame.shape != self.frame_space.shape or frame.dtype != np.uint8:
            raise RuntimeError(f"DeepMind Lab gave an RGB frame of {frame.shape} {frame.dtype}, "
                               f"expected {self.frame_space.shape} uint8")
        self.last_obs = frame
        instr = str(obs.get("INSTR", ""))
        if instr != self.instr or self._tokens is None:
            self.instr = instr
            self._tokens = self.tokenizer(instr) if self.tokenizer is not None else None
        return self._observation()

    def _observation(self) -> Any:
        if self.tokenizer is None:
            return self.last_obs
        return {"obs": self.last_obs, "instr": self._tokens}

    def _info(self) -> dict:
        return {"instr": self.instr} if self.instr else {}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        # DeepMind Lab seeds are C ints; every episode gets its own, drawn from the env's generator,
        # so a seeded env replays the same sequence of episodes
        self.lab.reset(seed=int(self.np_random.integers(0, 2**31 - 1)))
        self.episode_return = 0.0
        return self._read_obs(), self._info()

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        a = int(action)
        if not 0 <= a < len(self.actions):
            raise ValueError(f"action {action!r} out of range: this action set has {len(self.actions)} actions")
        reward = float(self.lab.step(self.actions[a], num_steps=self.frameskip))
        self.episode_return += reward
        if self.lab.is_running():
            return self._read_obs(), reward, False, False, self._info()
        # the episode is over: DeepMind Lab has no frame to show any more, the last one stands in
        info = self._info()
        info["episode_extra_stats"] = episode_stats(self.level, self.episode_return, self.objective)
        return self._observation(), reward, True, False, info

    def render(self) -> np.ndarray | None:
        frame = np.ascontiguousarray(self.last_obs.transpose(1, 2, 0))
        if self.render_mode == "rgb_array":
            return frame
        if self.render_mode == "human":
            import cv2

            try:
                cv2.imshow(f"sfx {self.level}", cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
                cv2.waitKey(1)
            except cv2.error as e:  # opencv-python-headless has no windows
                raise ImportError(f"OpenCV cannot open a window: {e}") from None
        return None

    def close(self) -> None:
        lab = getattr(self, "lab", None)
        if lab is not None:
            lab.close()
            self.lab = None


def target_objective(level: str, raw_score: float, objective: str) -> float:
    """The number PBT maximises for one episode.

    ``'hns_capped'`` (dmlab_30): the level's human-normalised score capped at 100, so policies are
    ranked by the DMLab-30 metric and no level with a huge score range dominates. ``'raw'`` (a
    single level): the episode return; on one level it ranks policies exactly as the uncapped
    human-normalised score would, and a cap would stop telling super-human policies apart.
    Levels without baselines fall back to the raw score.
    """
    if objective == "hns_capped":
        hns = human_normalized_score(level, raw_score, cap=HNS_CAP)
        if hns is not None:
            return hns
    return float(raw_score)


def episode_stats(level: str, raw_score: float, objective: str) -> dict[str, float]:
    """The ``episode_extra_stats`` of one finished episode (see :class:`DmLabEnv`)."""
    stats = {"dmlab_raw_score": float(raw_score)}
    hns = human_normalized_score(level, raw_score)
    if hns is not None:
        stats["dmlab_human_normalized_score"] = hns
        stats[f"dmlab30/{level}/raw_score"] = float(raw_score)
        stats[f"dmlab30/{level}/hns"] = hns
    stats["dmlab_target_objective"] = target_objective(level, raw_score, objective)
    return stats
