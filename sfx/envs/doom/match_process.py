"""The process that plays one multiplayer VizDoom match (see :mod:`sfx.envs.doom.multiplayer`).

Why a process of its own: a multiplayer ``init()`` that fails can crash the Python process that
calls it, and a player whose engine stalls blocks every other player forever (the engine has no
step timeout). The match process therefore makes itself a process group leader (``os.setsid``);
the engines it starts inherit the group, so the env can end the whole match (this process and
every engine) with one ``killpg`` and start a new one.

Inside: one thread per player (player 0 hosts, the others join). Players advance in lockstep:
each sets its buttons once per agent step, then every player advances one tic and waits at a
barrier before the next tic (any other schedule drifts or deadlocks in networked VizDoom).
Observations go to shared memory ``[num_agents, C, H, W]``; only small tuples cross the pipe.

The match process exits on its own (killing its group) as soon as its parent is gone, so a
rollout worker that dies without ``close()`` leaves no game processes behind.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any

import numpy as np

# game variables read after every step, in this order (the env indexes them by name)
MATCH_VARIABLES = ("FRAGCOUNT", "DEATHCOUNT", "HITCOUNT", "HITS_TAKEN", "DAMAGECOUNT", "DAMAGE_TAKEN",
                   "KILLCOUNT", "ITEMCOUNT", "HEALTH", "ARMOR", "SELECTED_WEAPON_AMMO")

JOIN_DELAY_SEC = 0.25

# server settings of every match: players respawn at once (no idle dead agents), no autoaim
# (aiming is the agent's job), spawn protection and far spawns (no spawn kills), no crouch/jump
_HOST_ARGS = ("-netmode 0 -deathmatch +sv_forcerespawn 1 +sv_noautoaim 1 +sv_respawnprotect 1 "
              "+sv_spawnfarthest 1 +sv_nocrouch 1 +sv_nojump 1 +viz_respawn_delay 0")


@dataclass(frozen=True)
class MatchSpec:
    """Everything the match process needs (plain values: it is pickled to a spawned process).

    Attributes:
        cfg_path: the scenario ``.cfg`` (wad and defaults).
        doom_map: map lump, e.g. ``map01``.
        buttons: button names of every player.
        num_agents: players controlled by the env.
        num_bots: built-in bots added by the host.
        bots_cfg_path: a ``bots.cfg`` for the engine (``None``: vizdoom's bundled one).
        frameskip: tics per agent step.
        timelimit_min: match length in game minutes (``+timelimit``).
        render_size, obs_size: ``(w, h)`` rendered and observed.
        pixel_format: ``rgb`` or ``gray``.
        interpolation: the resize's filter (``--resize_interpolation``).
        seed: host seed (``None``: the engine's).
        connect_timeout_sec: how long the host waits for joiners in ``init()``.
        render: render options over the .cfg's (``sfx.envs.doom.game.parse_render``'s pairs).
    """

    cfg_path: str
    doom_map: str
    buttons: tuple[str, ...]
    num_agents: int
    num_bots: int
    bots_cfg_path: str | None
    frameskip: int
    timelimit_min: float
    render_size: tuple[int, int]
    obs_size: tuple[int, int]
    pixel_format: str
    seed: int | None
    connect_timeout_sec: int = 10
    interpolation: str = "linear"
    render: tuple[tuple[str, bool], ...] = ()

    def obs_shape(self) -> tuple[int, int, int]:
        """One agent's observation shape ``(C, H, W)``."""
        return (1 if self.pixel_format == "gray" else 3, self.obs_size[1], self.obs_size[0])


def _kill_own_group() -> None:
    os.killpg(os.getpgrp(), signal.SIGKILL)


def _orphaned(workdir: str) -> None:
    # nobody is left to delete the match's folder; engines write into it only at init and at a clean
    # close, neither of which happens once they are SIGKILLed right after
    shutil.rmtree(workdir, ignore_errors=True)
    _kill_own_group()


def _watch_parent(parent_pid: int, workdir: str) -> None:
    # reparenting (to init or a subreaper) is the only portable sign that the parent died
    while True:
        if os.getppid() != parent_pid:
            _orphaned(workdir)
        time.sleep(0.2)


def _make_player(spec: MatchSpec, index: int, port: int, workdir: str) -> Any:
    import vizdoom as vzd

    from sfx.envs.doom.game import FrameConverter, apply_render

    converter = FrameConverter(spec.render_size, spec.obs_size, spec.pixel_format, spec.interpolation)
    game = vzd.DoomGame()
    game.load_config(spec.cfg_path)
    game.set_doom_map(spec.doom_map)
    game.set_window_visible(False)
    game.set_sound_enabled(False)
    game.set_mode(vzd.Mode.PLAYER)  # synchronous: the engine waits for each action
    game.set_screen_resolution(getattr(vzd.ScreenResolution, f"RES_{spec.render_size[0]}X{spec.render_size[1]}"))
    game.set_screen_format(converter.screen_format)
    apply_render(game, spec.render)
    game.set_available_buttons([getattr(vzd.Button, b) for b in spec.buttons])
    game.set_available_game_variables([getattr(vzd.GameVariable, v) for v in MATCH_VARIABLES])
    game.set_episode_timeout(0)  # the server's +timelimit ends the match for every player at once
    game.set_doom_config_path(os.path.join(workdir, f"_vizdoom_{index}.ini"))
    if spec.seed is not None:
        game.set_seed((int(spec.seed) + index) % (2 ** 32))
    timeout = f"+viz_connect_timeout {spec.connect_timeout_sec}"
    if index == 0:
        game.add_game_args(f"-host {spec.num_agents} -port {port} {_HOST_ARGS} +timelimit {spec.timelimit_min} "
                           f"{timeout}")
        if spec.bots_cfg_path is not None:
            game.add_game_args(f"+viz_bots_path {spec.bots_cfg_path}")
    else:
        game.add_game_args(f"-join 127.0.0.1 -port {port} {timeout}")
    game.add_game_args(f"+name Agent{index} +colorset {index}")
    game.init()
    return game, converter


def match_main(conn: Any, shm_name: str, spec: MatchSpec, port: int, parent_pid: int, workdir: str) -> None:
    """Entry of the match process: build the players, then serve ``step``/``reset``/``close`` requests.

    Replies on ``conn``: ``("ready", None)`` after init, ``("ok", results)`` per request, or
    ``("error", text)``; results are per player ``(finished, variables float64 array)``.
    """
    _lead_own_group(parent_pid, workdir)
    # a spawned child shares its parent's resource tracker, so attaching registers nothing new and the
    # env's unlink() is the one unregistration
    shm = shared_memory.SharedMemory(name=shm_name)
    n = spec.num_agents
    obs = np.ndarray((n, *spec.obs_shape()), dtype=np.uint8, buffer=shm.buf)
    barrier = threading.Barrier(n)
    requests = [queue.Queue() for _ in range(n)]
    replies: queue.Queue = queue.Queue()
    for i in range(n):
        threading.Thread(target=_player, args=(spec, i, port, workdir, obs, barrier, requests[i], replies),
                         daemon=True).start()

    status, payload = _gather(replies, n)
    conn.send(("ready", None) if status == "ok" else (status, payload))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the env is gone
            _orphaned(workdir)
        op = msg[0]
        for i in range(n):
            requests[i].put((op, msg[1][i].tolist() if op == "step" else None))
        status, payload = _gather(replies, n)
        conn.send((status, payload))
        if op == "close" or status == "error":
            break
    conn.close()


def _lead_own_group(parent_pid: int, workdir: str) -> None:
    """Make this process the leader of a process group of its own (the engines inherit it: one killpg ends the
    whole match), watched for its parent's death, with the engines' console output sent to /dev/null, working in
    ``workdir``."""
    os.setsid()
    # the pipe (and the resource tracker's) arrived as inheritable fds: engines holding a copy would hide
    # this process's death from the env (no EOF until the step timeout) and keep the tracker alive
    for fd in os.listdir("/proc/self/fd"):
        if int(fd) > 2:
            try:
                os.set_inheritable(int(fd), False)
            except OSError:
                pass  # the listing's own fd, already closed
    threading.Thread(target=_watch_parent, args=(parent_pid, workdir), daemon=True).start()
    # the engines print their console and network handshake to stdout and stderr, which they inherit as
    # fds 1 and 2: point those at /dev/null and keep this process's own Python stderr on a copy
    sys.stderr = os.fdopen(os.dup(2), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)
    os.chdir(workdir)  # the engines create _vizdoom/ in the working directory; this process is ours alone


def _player(spec: MatchSpec, i: int, port: int, workdir: str, obs: np.ndarray, barrier: threading.Barrier,
            requests: queue.Queue, replies: queue.Queue) -> None:
    """Player ``i``'s thread: its engine (player 0 hosts and adds the bots), then one reply ``(i, status,
    payload)`` per request from ``requests`` until ``close`` or an error."""
    if i > 0:
        # joiners start their init() after the host's has begun: concurrent inits in one process
        # crash it now and then (measured: about 1 start in 5 without the delay)
        time.sleep(JOIN_DELAY_SEC)
    try:
        game, converter = _make_player(spec, i, port, workdir)
    except Exception as e:  # noqa: BLE001 - reported to the env, which restarts the match
        replies.put((i, "error", f"player {i} init: {e!r}"))
        return
    if i == 0:
        for _ in range(spec.num_bots):
            game.send_game_command("addbot")  # bots stay for every later episode
    replies.put((i, "ready", None))
    variables = np.zeros(len(MATCH_VARIABLES), np.float64)
    while True:
        op, payload = requests.get()
        try:
            if op == "step":
                game.set_action(payload)
                for k in range(spec.frameskip):
                    # every player passes every barrier (finished or not), so none waits for a tic
                    # another will never play
                    if not game.is_episode_finished():
                        game.advance_action(1, k == spec.frameskip - 1)
                    barrier.wait()
                replies.put((i, "ok", _read(game, converter, obs, i, variables)))
            elif op == "reset":
                game.new_episode()
                replies.put((i, "ok", _read(game, converter, obs, i, variables)))
            elif op == "close":
                game.close()
                replies.put((i, "ok", None))
                return
        except Exception as e:  # noqa: BLE001 - an engine died: free the others, report, get killed
            barrier.abort()
            replies.put((i, "error", f"player {i} {op}: {e!r}"))
            return


def _read(game: Any, converter: Any, obs: np.ndarray, i: int, variables: np.ndarray) -> tuple[bool, np.ndarray]:
    """Player ``i``'s state after a step or reset: its frame into ``obs[i]``; whether its episode finished and its
    game variables (a copy of ``variables``, the buffer they are read into)."""
    finished = game.is_episode_finished()
    state = None if finished else game.get_state()
    if state is not None:
        obs[i] = converter(state.screen_buffer)
        variables[:] = state.game_variables
    else:  # no state after the end (or while dead): read the variables one by one
        for k, v in enumerate(game.get_available_game_variables()):
            variables[k] = game.get_game_variable(v)
    return finished, variables.copy()


def _gather(replies: queue.Queue, n: int) -> tuple[str, Any]:
    """Every player's reply, in player order: ``("ok", results)``, or the first error at once (the other players
    may be blocked inside their engines)."""
    results: list[Any] = [None] * n
    for _ in range(n):
        i, status, payload = replies.get()
        if status == "error":
            return "error", payload
        results[i] = payload
    return "ok", results
