"""Multiplayer Doom: every player of a networked VizDoom match is one agent of a :class:`MultiAgentEnv`.

=====================  ==================  ============================================================
env name               map                 players (defaults; ``--doom_num_agents``/``--doom_num_bots``)
=====================  ==================  ============================================================
doom_duel              multi_duel.wad      2 agents (self-play); the map has 2 deathmatch starts only
doom_duel_bots         multi_duel.wad      1 agent + 1 built-in bot (the map's 2 starts)
doom_deathmatch        cig.wad MAP01       4 agents (self-play), 2-8 allowed
doom_deathmatch_bots   cig.wad MAP01       1 agent + 7 bots, agents + bots <= 8 (the engine's limit)
=====================  ==================  ============================================================

cig.wad MAP01 is used for more than 2 players because it has 25 deathmatch starts (the bundled
``multi_deathmatch.wad`` is a single-player style map); multi_duel.wad has exactly 2.

Reward: the change of the agent's frag count (FRAGCOUNT: +1 per frag, -1 per suicide) per step,
plus ``--doom_reward_shaping`` components (:mod:`sfx.envs.doom.reward_shaping`; ``death`` counts a
DEATHCOUNT increase here, since players respawn at once). Players respawn immediately, so deaths
do not end episodes; the match's ``--doom_timelimit_min`` ends the episode of every agent on the
same step, as a truncation (a time limit the agents cannot see; the learner bootstraps).

Episode statistics (extra keys of ``infos[i]['episode']``): frags, deaths, hits, hits_taken,
damage, damage_taken, kills, items (counters of the episode), place (1 = most frags among the
agents; bots are not ranked) and match_restart (1 when the episode was cut by a match restart).

Bots: ``--doom_bot_difficulty`` (0-100) writes a ``bots.cfg`` whose bots all have that value for
ZDoom's four bot skill fields (``aiming``, ``perfection``, ``reaction``, ``isp``: accuracy,
consistency, reaction time, intelligence); without it the engine's bundled ``bots.cfg`` is used
(a mix of skills, bots picked at random). The game's ``doom_skill`` affects monsters only.

Processes: each match is a process of its own (:mod:`sfx.envs.doom.match_process`) that leads a
process group with its engines. A step that gets no answer within ``--doom_match_timeout_sec``
(a stalled or crashed engine), or a match that reports an error, is logged; the whole group is
killed with SIGKILL, the match restarts on a new port, and the step ends every agent's episode as
truncated (with ``match_restart`` = 1 in its stats), so no sample is silently lost or invented.
``close()`` kills the group; a match whose parent dies kills its group by itself.

Host ports are drawn from 20000-32767 (below Linux's ephemeral range, where joiners' own sockets
land), checked with a test bind, and never reused by two live matches of one process.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import random
import shutil
import signal
import socket
import tempfile
import threading
import weakref
from collections.abc import Mapping
from multiprocessing import shared_memory
from typing import Any

import gymnasium
import numpy as np

from sfx.errors import ConfigError
from sfx.envs.doom.actions import DoomActions
from sfx.envs.doom.match_process import MATCH_VARIABLES, MatchSpec, match_main
from sfx.envs.doom.reward_shaping import RewardShaping, parse_reward_shaping
from sfx.envs.doom.scenarios import MAX_PLAYERS, MULTIPLAYER_SCENARIOS, MultiplayerScenario, multiplayer_scenario_of
from sfx.envs.multi_agent import MultiAgentEnv

log = logging.getLogger(__name__)

PORT_RANGE = (20000, 32767)


def match_players(scenario: MultiplayerScenario, num_agents: int | None, num_bots: int | None) -> tuple[int, int]:
    """``(agents, bots)`` of a match: the flags, or the scenario's defaults.

    Raises:
        ConfigError: for counts the map or the engine cannot hold.
    """
    agents = scenario.num_agents if num_agents is None else int(num_agents)
    bots = scenario.num_bots if num_bots is None else int(num_bots)
    if agents < scenario.min_agents:
        raise ConfigError(f"--doom_num_agents={agents}: doom_{scenario.name} needs at least {scenario.min_agents}")
    if bots < 0:
        raise ConfigError(f"--doom_num_bots={bots} must be >= 0")
    if agents + bots > scenario.max_players:
        raise ConfigError(f"--doom_num_agents={agents} + --doom_num_bots={bots} players: doom_{scenario.name} holds "
                          f"at most {scenario.max_players}")
    return agents, bots


# ports handed to live matches of this process: a test bind cannot see a port a match is about to bind
_PORTS_IN_USE: set[int] = set()
_PORTS_LOCK = threading.Lock()


def pick_port(rng: random.Random, tries: int = 200) -> int:
    """A free UDP port in :data:`PORT_RANGE` (test-bound, not used by another match of this process)."""
    with _PORTS_LOCK:
        for _ in range(tries):
            port = rng.randint(*PORT_RANGE)
            if port in _PORTS_IN_USE:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                try:
                    s.bind(("0.0.0.0", port))
                except OSError:
                    continue
            _PORTS_IN_USE.add(port)
            return port
    raise RuntimeError(f"no free UDP port in {PORT_RANGE} after {tries} tries")


def _release_port(port: int | None) -> None:
    with _PORTS_LOCK:
        _PORTS_IN_USE.discard(port)


def write_bots_cfg(path: str, difficulty: int, count: int = MAX_PLAYERS) -> None:
    """A ZDoom ``bots.cfg`` of ``count`` bots whose skill fields all equal ``difficulty`` (0-100)."""
    entries = [f"{{\n    name        Bot{k}\n    aiming      {difficulty}\n    perfection  {difficulty}\n"
               f"    reaction    {difficulty}\n    isp         {difficulty}\n    skin        base\n}}\n"
               for k in range(1, count + 1)]
    with open(path, "w") as f:
        f.write("\n".join(entries))


class _MatchHandle:
    """One running match process, seen from the env (no retries here: the env decides)."""

    def __init__(self, spec: MatchSpec, shm_name: str, port: int, workdir: str, init_timeout_sec: float) -> None:
        ctx = multiprocessing.get_context("spawn")  # fork would copy the worker's threads and torch state
        self.conn, child = ctx.Pipe()
        self.port = port
        self.process = ctx.Process(target=match_main, args=(child, shm_name, spec, port, os.getpid(), workdir),
                                   daemon=False, name=f"doom-match-{port}")
        self.process.start()
        child.close()
        self.pid = self.process.pid
        try:
            self.request(None, init_timeout_sec, expect="ready")
        except BaseException:
            # engines that did start (a joiner still contacting a crashed host) must not outlive a failed start
            self.kill()
            raise

    def request(self, msg: tuple | None, timeout_sec: float, expect: str = "ok") -> Any:
        """Send ``msg`` (if any) and wait for the reply; :class:`TimeoutError`/:class:`RuntimeError` on failure."""
        try:
            if msg is not None:
                self.conn.send(msg)
            answered = self.conn.poll(timeout_sec)
            status, payload = self.conn.recv() if answered else (None, None)
        except (EOFError, OSError) as e:
            raise RuntimeError(f"match process gone (exit code {self.process.exitcode}): {e!r}") from None
        if not answered:
            raise TimeoutError(f"no answer in {timeout_sec:.1f} s")
        if status != expect:
            raise RuntimeError(str(payload))
        return payload

    def kill(self) -> None:
        """SIGKILL the match process and every engine in its group; wait for the match process."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.process.kill()  # in case it died before setsid() made the group
        except Exception:  # noqa: BLE001
            pass
        self.process.join(5)
        self.conn.close()
        _release_port(self.port)


def _stop(state: dict) -> None:
    # module-level so weakref.finalize holds no reference to the env
    handle = state.get("handle")
    if handle is not None:
        try:
            handle.request(("close", None), 3.0)
        except Exception:  # noqa: BLE001 - killed below anyway
            pass
        handle.kill()
        state["handle"] = None
    shm = state.get("shm")
    if shm is not None:
        shm.close()
        shm.unlink()
        state["shm"] = None
    if state.get("workdir"):
        shutil.rmtree(state["workdir"], ignore_errors=True)
        state["workdir"] = None


class DoomMultiplayerEnv(MultiAgentEnv):
    """A networked VizDoom deathmatch whose players (besides bots) are the env's agents.

    Args:
        scenario: which map and defaults.
        num_agents, num_bots: players (see :func:`match_players`).
        res_w, res_h, wide_aspect_ratio, pixel_format, interpolation: observation (as the single-player ``doom_``
            envs).
        frameskip: tics per agent step.
        timelimit_min: episode (match) length in game minutes.
        bot_difficulty: 0-100 for every bot's skill fields, or ``None`` for vizdoom's bundled bots.
        match_timeout_sec: a step without answer for this long restarts the match.
        action_space: ``discrete`` or ``tuple`` (:mod:`sfx.envs.doom.actions`).
        reward_shaping: component -> weight, added to the frag reward.
        seed: seed of the host's game (``None``: the engine's).
        measurements: observe each player's match variables too (a Dict observation
            ``{"obs": frame, "measurements": float32[len(MATCH_VARIABLES)]}``, as the single-player envs).
        render_mode: ``rgb_array``: ``render()`` returns agent 0's view as ``(H, W, 3)`` uint8.
        render: every player's render options over the map's .cfg (``--doom_render``;
            ``sfx.envs.doom.game.parse_render``'s pairs).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 35}

    def __init__(self, scenario: MultiplayerScenario, num_agents: int | None = None, num_bots: int | None = None,
                 res_w: int = 128, res_h: int = 72, wide_aspect_ratio: bool = False, pixel_format: str = "rgb",
                 frameskip: int = 4, timelimit_min: float = 4.0, bot_difficulty: int | None = None,
                 match_timeout_sec: float = 10.0, action_space: str = "discrete",
                 reward_shaping: Mapping[str, float] | None = None, seed: int | None = None,
                 measurements: bool = False, render_mode: str | None = None, interpolation: str = "linear",
                 render: tuple[tuple[str, bool], ...] = ()) -> None:
        from sfx.envs.doom.game import render_resolution

        if frameskip < 1:
            raise ValueError(f"frameskip must be >= 1, got {frameskip}")
        if match_timeout_sec <= 0:
            raise ConfigError(f"--doom_match_timeout_sec={match_timeout_sec} must be > 0")
        if bot_difficulty is not None and not 0 <= bot_difficulty <= 100:
            raise ConfigError(f"--doom_bot_difficulty={bot_difficulty} must be in [0, 100]")
        self.scenario = scenario
        self.num_agents, self.num_bots = match_players(scenario, num_agents, num_bots)
        self.match_timeout_sec = float(match_timeout_sec)
        self.reward_shaping = RewardShaping(reward_shaping)  # the default; each agent's own below
        self.agent_shaping = [RewardShaping(reward_shaping) for _ in range(self.num_agents)]
        self.actions = DoomActions(scenario.buttons, action_space)
        self.action_space = self.actions.space
        # ports come from OS entropy, not the seed: two runs with one seed on one machine must not collide
        self._port_rng = random.Random()
        self._state: dict[str, Any] = {"workdir": tempfile.mkdtemp(prefix="sfx_doom_match_")}
        self._closer = weakref.finalize(self, _stop, self._state)
        bots_cfg = None
        if bot_difficulty is not None and self.num_bots > 0:
            bots_cfg = os.path.join(self._state["workdir"], "bots.cfg")
            write_bots_cfg(bots_cfg, int(bot_difficulty))
        self.spec = MatchSpec(cfg_path=scenario.cfg_path(), doom_map=scenario.doom_map, buttons=scenario.buttons,
                              num_agents=self.num_agents, num_bots=self.num_bots, bots_cfg_path=bots_cfg,
                              frameskip=int(frameskip), timelimit_min=float(timelimit_min),
                              render_size=render_resolution(res_w, res_h, wide_aspect_ratio), obs_size=(res_w, res_h),
                              pixel_format=pixel_format, seed=seed, interpolation=interpolation,
                              render=tuple(render))
        shape = self.spec.obs_shape()
        self.measurements = bool(measurements)
        self.render_mode = render_mode
        frame_space = gymnasium.spaces.Box(0, 255, shape, np.uint8)
        if self.measurements:
            self.observation_space: gymnasium.Space = gymnasium.spaces.Dict({
                "obs": frame_space,
                "measurements": gymnasium.spaces.Box(-np.inf, np.inf, (len(MATCH_VARIABLES),), np.float32)})
        else:
            self.observation_space = frame_space
        self._state["shm"] = shared_memory.SharedMemory(create=True, size=self.num_agents * int(np.prod(shape)))
        self._obs = np.ndarray((self.num_agents, *shape), dtype=np.uint8, buffer=self._state["shm"].buf)
        self._var = {name: k for k, name in enumerate(MATCH_VARIABLES)}
        self.restarts = 0  # matches restarted after a timeout or an error, over the env's life
        self._needs_reset = True
        self._start_match()

    # -- match lifecycle -----------------------------------------------------------------------
    @property
    def port(self) -> int:
        """The current match's host port."""
        return self._state["handle"].port

    @property
    def match_pid(self) -> int:
        """Process id (and process group id) of the current match."""
        return self._state["handle"].pid

    def _start_match(self, attempts: int = 3) -> None:
        init_timeout = 3.0 * self.spec.connect_timeout_sec + 20.0
        error: Exception | None = None
        for attempt in range(attempts):
            port = pick_port(self._port_rng)
            try:
                self._state["handle"] = _MatchHandle(self.spec, self._state["shm"].name, port,
                                                     self._state["workdir"], init_timeout)
                return
            except (TimeoutError, RuntimeError) as e:
                error = e
                log.warning("doom_%s: match on port %d failed to start (attempt %d/%d): %s", self.scenario.name,
                            port, attempt + 1, attempts, e)
        raise RuntimeError(f"doom_{self.scenario.name}: the match did not start in {attempts} attempts: {error}")

    def _restart_match(self, reason: str) -> None:
        self.restarts += 1
        handle = self._state.get("handle")
        log.warning("doom_%s: match (pid %s, port %s) failed: %s; killing its process group and restarting "
                    "(restart #%d); the current episode ends as truncated for all %d agents", self.scenario.name,
                    handle.pid if handle else None, handle.port if handle else None, reason, self.restarts,
                    self.num_agents)
        if handle is not None:
            handle.kill()
            self._state["handle"] = None
        self._start_match()

    def _request(self, op: str, payload: Any = None) -> list[tuple[bool, np.ndarray]]:
        return self._state["handle"].request((op, payload), self.match_timeout_sec)

    # -- protocol ------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> tuple[list[Any], list[dict]]:
        # ``seed`` is ignored: the match's host was seeded at start, and a networked match is not
        # reproducible anyway (the players' threads interleave freely between tics)
        try:
            results = self._request("reset")
        except (TimeoutError, RuntimeError) as e:
            self._restart_match(f"reset: {e}")
            results = self._request("reset")
        self._begin_episode(results)
        return self._observations(), [{} for _ in range(self.num_agents)]

    def step(self, actions: list[Any]) -> tuple[list[Any], list[float], list[bool], list[bool], list[dict]]:
        n = self.num_agents
        if len(actions) != n:
            raise ValueError(f"doom_{self.scenario.name} takes a list of {n} actions, got {len(actions)}")
        if self._needs_reset:
            self.reset()
        buttons = np.array([self.actions.to_buttons(a) for a in actions], dtype=np.float64)
        try:
            results = self._request("step", buttons)
        except (TimeoutError, RuntimeError) as e:
            return self._end_by_restart(str(e))
        rewards = []
        for i, (_, variables) in enumerate(results):
            rewards.append(self._reward(i, variables))
        self._ep_len += 1
        finished = any(fin for fin, _ in results)
        obs = self._observations()
        infos: list[dict] = [{} for _ in range(n)]
        if finished:
            self._finish_episode(obs, infos, restarted=False)
            obs = self._auto_reset(infos)
        return obs, rewards, [False] * n, [finished] * n, infos

    def get_reward_shaping(self) -> dict[str, float]:
        return dict(self.reward_shaping.weights)

    def set_reward_shaping(self, weights: dict[str, float], agent_idx: int) -> None:
        """Agent ``agent_idx`` is rewarded with ``weights`` from its next step on (PBT gives each policy its own)."""
        self.agent_shaping[agent_idx] = RewardShaping(weights)

    def render(self) -> np.ndarray | None:
        """Agent 0's latest view as ``(H, W, 3)`` uint8 (``rgb_array`` mode; else ``None``)."""
        if self.render_mode != "rgb_array":
            return None
        frame = self._obs[0].transpose(1, 2, 0)
        return np.repeat(frame, 3, axis=2) if frame.shape[2] == 1 else np.ascontiguousarray(frame)

    def close(self) -> None:
        closer = getattr(self, "_closer", None)
        if closer is not None:
            closer()

    # -- internals -----------------------------------------------------------------------------
    def _observations(self) -> list[Any]:
        frames = [self._obs[i].copy() for i in range(self.num_agents)]
        if not self.measurements:
            return frames
        return [{"obs": f, "measurements": v.astype(np.float32)} for f, v in zip(frames, self._vars)]

    def _begin_episode(self, results: list[tuple[bool, np.ndarray]]) -> None:
        self._vars = [v.copy() for _, v in results]
        self._start_vars = [v.copy() for _, v in results]
        self._ep_reward = [0.0] * self.num_agents
        self._ep_len = 0
        self._shaping_sums = [{name: 0.0 for name in shaping.weights} for shaping in self.agent_shaping]
        self._needs_reset = False

    def _tracked(self, variables: np.ndarray) -> dict[str, float]:
        return {name: float(variables[k]) for name, k in self._var.items()}

    def _reward(self, i: int, variables: np.ndarray) -> float:
        before, after = self._tracked(self._vars[i]), self._tracked(variables)
        self._vars[i] = variables
        reward = after["FRAGCOUNT"] - before["FRAGCOUNT"]
        shaping = self.agent_shaping[i]
        if shaping.weights:
            died = after["DEATHCOUNT"] > before["DEATHCOUNT"]
            values = shaping.components(before, after, died)
            for name, weight in shaping.weights.items():
                self._shaping_sums[i][name] = self._shaping_sums[i].get(name, 0.0) + weight * values[name]
                reward += weight * values[name]
        self._ep_reward[i] += reward
        return float(reward)

    def _finish_episode(self, obs: list[np.ndarray], infos: list[dict], restarted: bool) -> None:
        frags = [self._vars[i][self._var["FRAGCOUNT"]] for i in range(self.num_agents)]
        for i in range(self.num_agents):
            end, start = self._tracked(self._vars[i]), self._tracked(self._start_vars[i])
            episode = {"reward": self._ep_reward[i], "len": self._ep_len}
            for stat, var in (("frags", "FRAGCOUNT"), ("deaths", "DEATHCOUNT"), ("hits", "HITCOUNT"),
                              ("hits_taken", "HITS_TAKEN"), ("damage", "DAMAGECOUNT"),
                              ("damage_taken", "DAMAGE_TAKEN"), ("kills", "KILLCOUNT"), ("items", "ITEMCOUNT")):
                episode[stat] = end[var] - start[var]
            episode["place"] = float(1 + sum(f > frags[i] for f in frags))
            episode["match_restart"] = float(restarted)
            for name, total in self._shaping_sums[i].items():
                episode[f"shaping_{name}"] = total
            infos[i]["final_obs"] = obs[i]
            infos[i]["episode"] = episode

    def _auto_reset(self, infos: list[dict]) -> list[np.ndarray]:
        self._needs_reset = True
        new_obs, reset_infos = self.reset()
        for info, reset_info in zip(infos, reset_infos):
            info["reset_info"] = reset_info
        return new_obs

    def _end_by_restart(self, reason: str) -> tuple[list[Any], list[float], list[bool], list[bool], list[dict]]:
        n = self.num_agents
        self._ep_len += 1  # the step was taken by the agents; its outcome is lost with the match
        last_obs = self._observations()
        infos: list[dict] = [{} for _ in range(n)]
        self._finish_episode(last_obs, infos, restarted=True)
        self._restart_match(reason)
        obs = self._auto_reset(infos)
        return obs, [0.0] * n, [False] * n, [True] * n, infos

    def __repr__(self) -> str:
        return f"DoomMultiplayerEnv(doom_{self.scenario.name}, agents={self.num_agents}, bots={self.num_bots})"


def validate_multiplayer_cfg(cfg: Any) -> None:
    """:class:`ConfigError` for multiplayer flags the scenario cannot take."""
    scenario = multiplayer_scenario_of(cfg.env)
    if scenario is None:
        raise ConfigError(f"--env={cfg.env} is not a multiplayer doom env (known: "
                          f"{', '.join('doom_' + n for n in MULTIPLAYER_SCENARIOS)})")
    match_players(scenario, cfg.doom_num_agents, cfg.doom_num_bots)
    difficulty = cfg.doom_bot_difficulty
    if difficulty is not None and not 0 <= difficulty <= 100:
        raise ConfigError(f"--doom_bot_difficulty={difficulty} must be in [0, 100]")
    timelimit = cfg.doom_timelimit_min
    if not timelimit > 0:
        raise ConfigError(f"--doom_timelimit_min={timelimit} must be > 0 (a match without a time limit never "
                          f"ends its episodes)")
    timeout = cfg.doom_match_timeout_sec
    if not timeout > 0:
        raise ConfigError(f"--doom_match_timeout_sec={timeout} must be > 0")


def make_multiplayer_env(full_env_name: str, cfg: Any, env_config: dict | None = None,
                         render_mode: str | None = None) -> DoomMultiplayerEnv:
    """The :class:`DoomMultiplayerEnv` named by ``full_env_name``, configured by the ``doom_`` flags of ``cfg``."""
    from sfx.envs.doom.game import parse_render
    from sfx.envs.registry import env_seed

    scenario = multiplayer_scenario_of(full_env_name)
    if scenario is None:
        raise ConfigError(f"--env={full_env_name} is not a multiplayer doom env")
    return DoomMultiplayerEnv(
        scenario, num_agents=cfg.doom_num_agents, num_bots=cfg.doom_num_bots,
        res_w=cfg.res_w, res_h=cfg.res_h,
        wide_aspect_ratio=cfg.wide_aspect_ratio, pixel_format=cfg.pixel_format,
        interpolation=cfg.resize_interpolation,
        frameskip=cfg.env_frameskip, timelimit_min=cfg.doom_timelimit_min,
        bot_difficulty=cfg.doom_bot_difficulty,
        match_timeout_sec=cfg.doom_match_timeout_sec,
        action_space=cfg.doom_action_space,
        reward_shaping=parse_reward_shaping(cfg.doom_reward_shaping),
        seed=env_seed(cfg, env_config), measurements=cfg.doom_measurements,
        render_mode=render_mode, render=parse_render(cfg.doom_render))
