"""The ``minigrid_`` family: the gridworlds of the ``minigrid`` package, e.g. ``--env=minigrid_MemoryS7``.

Names: ``minigrid_MemoryS7`` is ``MiniGrid-MemoryS7-v0`` (the ``MiniGrid-`` prefix and the version
may be left out: the newest version is taken); full ids work too (``minigrid_MiniGrid-MemoryS7-v0``,
``minigrid_BabyAI-GoToLocal-v0``). Case does not matter in short names.

Observations. MiniGrid's own observation is a dict: ``image``, the agent's egocentric 7x7 view as
(object, colour, state) codes per cell (0..10, 0..5, 0..2), ``direction`` (0..3) and ``mission``
(a string, which no buffer can hold). sfx sees one flat uint8 vector instead: every cell's three codes
one-hot (11 + 6 + 3 = 20 values per cell, 980 in all), then the direction one-hot (4), so
``[7 * 7 * 20 + 4]`` of 0/1. Why one-hot: the codes are categories (a key is 5, a ball 6: "5.5" means
nothing), and a one-hot view lets the first layer weigh "a ball here" on its own. Why a flat vector:
the built-in convolutions need far larger images than 7x7, so an MLP reads it either way; a 1-D Box
gets the MLP whatever ``--encoder_type`` says. The ``mission`` is dropped: it is one fixed sentence in
the MiniGrid tasks (Memory, DoorKey, KeyCorridor, ...), but it varies in BabyAI and in a few MiniGrid
tasks (Fetch, GoToDoor, GoToObject, PutNear), which then cannot be solved from this observation.
``--minigrid_obs=codes`` gives the raw codes instead (``[7 * 7 * 3 + 1]``: the view, then the
direction), for comparison or for a custom encoder that embeds them. ``--minigrid_agent_view_size``
sets the view's side (MiniGrid's ``agent_view_size``; the vector shrinks with it).

Memory. MemoryS11 and larger need a core: the object shown in the start room is out of sight by the
time the agent reaches the two at the end of the hallway. MemoryS7 and S9 do not, with the 7x7 view:
from the junction, looking back, the agent sees all three at once, so a feed-forward policy can solve
them. ``--env=minigrid_MemoryS7 --minigrid_agent_view_size=3`` keeps S7's short episodes and needs a
memory (no pose shows the start object together with an end object), which makes it the quick test of
a core: without one, success stays at 0.5; ``--rnn_type=trxl`` reaches 0.9 within about 0.2M-0.36M env
steps (tests/envs/test_minigrid_memory.py; the README compares the cores).

Rewards are MiniGrid's: ``1 - 0.9 * step_count / max_steps`` on success, 0 otherwise (a few tasks
also give a negative reward, e.g. Dynamic-Obstacles on a collision). Every episode reports
``success`` (TensorBoard ``episode/success``, averaged over ``--stats_avg`` episodes): 1 when it ended
on a terminal step with a positive reward (the goal, or the matching object in Memory), else 0.
``--env_backend=envpool`` steps each rollout worker split as one EnvPool pool (its C++ MiniGrid and BabyAI, the
same flat observation; docs/environments/envpool.md).
MiniGrid's own time limit (``max_steps``, e.g. ``5 * size**2`` = 245 steps in MemoryS7) ends an
episode as truncated, so the learner bootstraps from it instead of treating it as a terminal state.
"""

from __future__ import annotations

import argparse
import difflib
import re
from typing import Any

import gymnasium
import minigrid  # noqa: F401  (importing it registers its envs with gymnasium)
import numpy as np
from minigrid.core.constants import COLOR_TO_IDX, DIR_TO_VEC, OBJECT_TO_IDX, STATE_TO_IDX

from sfx.errors import ConfigError
from sfx.envs.envpool import add_backend_params, check_envpool_cfg, pool_threads, require_envpool, uses_envpool
from sfx.envs.envpool.families import check_no_frameskip, seeds_for
from sfx.envs.multi_agent import SingleAgentEnvAdapter
from sfx.envs.registry import env_seed, gym_id_stem, register_env_family
from sfx.envs.wrappers import FrameSkip

PREFIX = "minigrid_"
OBS_KINDS = ("onehot", "codes")

# sizes of MiniGrid's cell codes (object, colour, door state) and of its directions
NUM_OBJECTS, NUM_COLORS, NUM_STATES = len(OBJECT_TO_IDX), len(COLOR_TO_IDX), len(STATE_TO_IDX)
NUM_DIRECTIONS = len(DIR_TO_VEC)
# offsets of the three codes inside one cell's one-hot block
_CODE_OFFSETS = np.array([0, NUM_OBJECTS, NUM_OBJECTS + NUM_COLORS], dtype=np.int64)
CELL_SIZE = NUM_OBJECTS + NUM_COLORS + NUM_STATES

# Measured on MemoryS7 with a GRU core (2 rollout workers on 2 shared CPU cores). The agent first
# settles on "go to either side" (success about 0.5); what ends that plateau soonest is learning from
# each sample several times: 4 minibatches of 256 per iteration and 4 epochs over them reached success
# 0.95 after 0.33M env steps (0.77M-1.03M over 3 seeds with a 3x3 view, where only a memory helps, and
# 1 epoch stayed at 0.5 for 2.3M). With Sample Factory's 1 epoch over 1024 samples it took 0.71M and
# 1.17M steps (two seeds), and three other 1-epoch runs were still below 0.95 after 0.8M to 1.27M steps
# (best points: 512 units and lr 1e-4: 0.87; lr 1e-3: 0.71; exploration 0.01: 0.62). 128 units: the
# input is one 7x7 view, and 128 (lr 3e-4) learned no slower than 512 (lr 1e-4) in those runs.
# --rnn_type=trxl: its attention and feed-forward widths scaled to those 128 units (4 heads of 32, an
# inner size of 256, as wide as sfx's TrXL defaults are for 512 units: --d_head=64 x 4 heads = 256 and
# --d_inner=1024 are 2x and 8x of 128 units). On MemoryS7 with the 3x3 view, 2 layers at these widths
# reached success 0.9 after 0.19M-0.25M env steps (seeds 1-3; seed 0: 0.36M; 2,300-2,500 FPS); at the
# global widths seed 1 stayed between 0.46 and 0.70 for 0.5M steps (1,600 FPS), gated (GTrXL) 0.63.
DEFAULT_OVERRIDES: dict[str, Any] = {
    "encoder_type": "mlp",
    "encoder_subtype": "mlp_mujoco",
    "hidden_size": 128,
    "learning_rate": 3e-4,
    "batch_size": 256,
    "num_batches_per_iteration": 4,
    "ppo_epochs": 4,
    "d_head": 32,
    "d_inner": 256,
}


def minigrid_env_ids() -> list[str]:
    """Every gymnasium id the ``minigrid`` package registers (MiniGrid-* and BabyAI-*)."""
    return sorted(k for k, spec in gymnasium.registry.items()
                  if str(spec.entry_point).startswith("minigrid"))


def short_name(env_id: str) -> str:
    """``MiniGrid-MemoryS7-v0`` -> ``MemoryS7``; ``BabyAI-GoToLocal-v0`` -> ``BabyAI-GoToLocal``."""
    name = re.sub(r"-v\d+$", "", env_id)
    return name[len("MiniGrid-"):] if name.startswith("MiniGrid-") else name


def _version(env_id: str) -> int:
    match = re.search(r"-v(\d+)$", env_id)
    return int(match.group(1)) if match else 0


def minigrid_id(full_env_name: str) -> str:
    """``minigrid_MemoryS7`` -> ``MiniGrid-MemoryS7-v0``; :class:`ConfigError` (with close matches) if unknown."""
    name = full_env_name[len(PREFIX):] if full_env_name.startswith(PREFIX) else full_env_name
    ids = minigrid_env_ids()
    if name in ids:
        return name
    by_short: dict[str, str] = {}
    for env_id in ids:  # the newest version of each short name wins
        key = short_name(env_id).lower()
        if key not in by_short or _version(env_id) > _version(by_short[key]):
            by_short[key] = env_id
    key = short_name(name).lower()
    if key in by_short:
        return by_short[key]
    close = difflib.get_close_matches(key, list(by_short), n=3, cutoff=0.6)
    hint = (f"; did you mean: {', '.join(PREFIX + short_name(by_short[c]) for c in close)}?" if close
            else f"; known: {', '.join(PREFIX + short_name(by_short[k]) for k in _listing_order(by_short)[:12])}, ...")
    raise ConfigError(f"--env={full_env_name}: the minigrid package has no env {name!r}{hint}")


def _listing_order(by_short: dict[str, str]) -> list[str]:
    """Short names with MiniGrid's own tasks before BabyAI's (which need the mission this family drops)."""
    return sorted(by_short, key=lambda k: (by_short[k].startswith("BabyAI-"), k))



def flat_view_space(view_shape: tuple[int, int], obs_kind: str) -> gymnasium.spaces.Box:
    """The flat vector's space for a view of ``view_shape`` cells (see the module docstring)."""
    cells = int(np.prod(view_shape))
    if obs_kind == "onehot":
        return gymnasium.spaces.Box(0, 1, (cells * CELL_SIZE + NUM_DIRECTIONS,), np.uint8)
    high = max(NUM_OBJECTS, NUM_COLORS, NUM_STATES, NUM_DIRECTIONS) - 1
    return gymnasium.spaces.Box(0, high, (cells * 3 + 1,), np.uint8)


def flat_views(image: np.ndarray, direction: np.ndarray, obs_kind: str) -> np.ndarray:
    """A batch of MiniGrid views -> flat vectors: ``image`` ``[n, H, W, 3]`` codes and ``direction`` ``[n]`` ->
    ``uint8 [n, size]`` (one array operation for the whole batch; the Python envs and EnvPool's share it)."""
    n = len(image)
    codes = np.asarray(image, dtype=np.int64).reshape(n, -1, 3)
    direction = np.asarray(direction, dtype=np.int64).reshape(n)
    if obs_kind == "codes":
        return np.concatenate([codes.reshape(n, -1), direction[:, None]], axis=1).astype(np.uint8)
    cells = codes.shape[1]
    size = cells * CELL_SIZE + NUM_DIRECTIONS
    out = np.zeros((n, size), np.uint8)
    # each cell's three codes land in its block of CELL_SIZE (object, then colour, then state offsets)
    hot = (np.arange(cells, dtype=np.int64) * CELL_SIZE)[None, :, None] + _CODE_OFFSETS + codes
    rows = np.arange(n, dtype=np.int64)[:, None]
    out[rows, hot.reshape(n, -1)] = 1
    out[np.arange(n), size - NUM_DIRECTIONS + direction] = 1
    return out


class MiniGridAgentView(gymnasium.Wrapper):
    """MiniGrid's dict observation -> one flat uint8 vector (see the module docstring), and a
    ``success`` episode statistic.

    Args:
        env: a MiniGrid env (its observation a dict with ``image`` and ``direction``).
        obs_kind: ``onehot`` (``[H * W * 20 + 4]`` of 0/1) or ``codes`` (``[H * W * 3 + 1]``).
    """

    def __init__(self, env: gymnasium.Env, obs_kind: str = "onehot") -> None:
        super().__init__(env)
        if obs_kind not in OBS_KINDS:
            raise ValueError(f"obs_kind {obs_kind!r} is not known; allowed: {', '.join(OBS_KINDS)}")
        self.view_shape = tuple(env.observation_space["image"].shape[:2])
        self.obs_kind = obs_kind
        self.observation_space = flat_view_space(self.view_shape, obs_kind)

    def observation(self, obs: dict) -> np.ndarray:
        """MiniGrid's dict -> the flat vector."""
        return flat_views(np.asarray(obs["image"])[None], np.asarray([obs["direction"]]), self.obs_kind)[0]

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict]:
        obs, info = self.env.reset(**kwargs)
        return self.observation(obs), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            info = dict(info)
            info["episode_extra_stats"] = {"success": float(bool(terminated) and reward > 0)}
        return self.observation(obs), reward, terminated, truncated, info


def add_minigrid_params(parser: argparse.ArgumentParser) -> None:
    """The family's own flags."""
    g = parser.add_argument_group("minigrid_ envs")
    g.add_argument("--minigrid_obs", choices=OBS_KINDS, default="onehot",
                   help="observation: onehot = each cell's object, colour and state codes and the direction "
                        "one-hot (a flat 0/1 vector); codes = the raw codes and the direction")
    g.add_argument("--minigrid_agent_view_size", type=int, default=None,
                   help="side of the agent's square egocentric view in cells (MiniGrid's agent_view_size: odd, "
                        ">= 3); None = the env's own (7)")
    add_backend_params(g)


def validate_minigrid_cfg(cfg: argparse.Namespace) -> None:
    """:class:`ConfigError` on an unknown env name or a bad family flag."""
    minigrid_id(cfg.env)
    size = cfg.minigrid_agent_view_size
    if size is not None and (size < 3 or size % 2 == 0):
        raise ConfigError(f"--minigrid_agent_view_size={size} is not valid; allowed: an odd number >= 3 "
                          f"(or None for the env's own view)")
    if uses_envpool(cfg):
        minigrid_options(cfg)


def make_minigrid_env(full_env_name: str, cfg: Any, env_config: dict | None = None,
                      render_mode: str | None = None) -> SingleAgentEnvAdapter:
    """Make the MiniGrid env with the flat observation ``cfg.minigrid_obs`` names, as one agent."""
    kwargs: dict[str, Any] = {"render_mode": render_mode, "disable_env_checker": True}
    if cfg.minigrid_agent_view_size is not None:
        kwargs["agent_view_size"] = cfg.minigrid_agent_view_size
    env: gymnasium.Env = MiniGridAgentView(gymnasium.make(minigrid_id(full_env_name), **kwargs), cfg.minigrid_obs)
    if cfg.env_frameskip > 1:
        env = FrameSkip(env, cfg.env_frameskip)
    return SingleAgentEnvAdapter(env, seed=env_seed(cfg, env_config))


def served_gym_id(gym_id: str) -> str | None:
    """``MiniGrid-MemoryS7-v0`` (any version) -> ``minigrid_MemoryS7``; None for an id minigrid does not have."""
    stem = gym_id_stem(gym_id)
    for env_id in minigrid_env_ids():
        if gym_id_stem(env_id) == stem:
            return PREFIX + short_name(env_id)
    return None



# ------------------------------------------------------------------------------------ on EnvPool (--env_backend)


def minigrid_options(cfg: Any) -> tuple[str, dict[str, Any]]:
    """``--env`` and the ``--minigrid_*`` flags -> (EnvPool task, its config)."""
    task = minigrid_id(cfg.env)
    served = set(require_envpool().list_all_envs())
    check_envpool_cfg(cfg, task, [PREFIX + short_name(i) for i in minigrid_env_ids() if i in served])
    check_no_frameskip(cfg, "the EnvPool backend does not repeat MiniGrid actions")
    options: dict[str, Any] = {}
    if cfg.minigrid_agent_view_size is not None:
        options["agent_view_size"] = int(cfg.minigrid_agent_view_size)
    return task, options


def make_minigrid_vector(cfg: Any, env_configs: list[dict]) -> Any:
    """The ``minigrid_`` family's ``make_vector_fn``: EnvPool's dict observations flattened as the Python envs'
    (:func:`sfx.envs.minigrid.flat_views`), and the ``success`` statistic."""
    if not uses_envpool(cfg):
        return None
    task, options = minigrid_options(cfg)
    kind = cfg.minigrid_obs
    view = require_envpool().make_spec(task, **options).observation_space["image"].shape[:2]

    def obs_fn(raw: dict) -> np.ndarray:
        return flat_views(raw["image"], raw["direction"], kind)

    from sfx.envs.envpool.vector import EnvPoolVector

    return EnvPoolVector(task, seeds_for(cfg, env_configs), options, pool_threads(cfg, len(env_configs)),
                         observation_space=flat_view_space(view, kind), obs_fn=obs_fn,
                         extra_stats_fn=_minigrid_success, name=f"envpool {task}")


def _minigrid_success(ended: np.ndarray, final_obs: Any, rewards: np.ndarray, terminated: np.ndarray,
                      info: dict) -> list[dict]:
    # as the Python envs': 1 when the episode ended on a terminal step with a positive reward
    return [{"success": float(t and r > 0)} for t, r in zip(terminated.tolist(), rewards.tolist())]


def register_family() -> None:
    """Register the ``minigrid_`` family (called by the registry on first use of a ``minigrid_`` name)."""
    register_env_family(PREFIX, make_minigrid_env, add_params_fn=add_minigrid_params,
                        default_overrides=DEFAULT_OVERRIDES, validate_fn=validate_minigrid_cfg,
                        gym_id_fn=served_gym_id, make_vector_fn=make_minigrid_vector)
