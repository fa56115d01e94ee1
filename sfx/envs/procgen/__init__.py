"""The ``procgen_`` family: OpenAI's Procgen Benchmark (16 games) through EnvPool, e.g. ``--env=procgen_starpilot``.

Backend: EnvPool only (``--env_backend=envpool``, the one choice; ``pip install -e .[envpool]``). EnvPool's
Procgen is the C++ of procgen 0.10.7, which its authors test frame for frame against procgen's Python package. It
needs the system Qt 5 runtime (``libQt5Core``/``libQt5Gui``): ``scripts/install_qt5.sh`` installs it with apt-get
on Debian/Ubuntu (``./all_tests.sh`` and ``./run_main.sh`` call it); elsewhere install your system's Qt 5 base
libraries. Without it a ``procgen_`` env is a one-line error saying so.

Games: :data:`PROCGEN_GAMES` (``procgen_bigfish`` ... ``procgen_starpilot``). ``--procgen_distribution_mode``
(``easy``, default; ``hard``; and ``extreme`` / ``memory`` / ``exploration`` where the game has them: each game's
modes are listed in a bad value's error), ``--procgen_num_levels`` (0 = the unbounded level set) and
``--procgen_start_level`` choose the levels. The paper's generalization protocol trains on 200 levels
(``--procgen_num_levels=200 --procgen_start_level=0``) and tests on the full distribution
(``--procgen_num_levels=0``), easy mode, 25M env steps (Cobbe et al. 2020, sec. 2.2).

Observations are the game's ``uint8 (3, 64, 64)`` RGB picture (channels first), the 15 actions of procgen's
combo set, one game frame per agent step (no frame skip, no stack). An episode ends terminated at the game's own
end (death, or the level completed) and truncated at the game's time limit in steps (1000 in most games;
bigfish 6000, bossfight and plunder 4000, leaper and maze 500), which bootstraps. Episode statistics: ``reward``
and ``len``, and ``success`` (1 when the level was completed: EnvPool's ``prev_level_complete`` on the episode's last step).

Defaults (each from the Procgen paper, Cobbe et al. 2020, appendix, table of PPO hyperparameters, which OpenAI's
train-procgen and CleanRL's ppo_procgen.py also use): the IMPALA-CNN (``--encoder_type=resnet
--encoder_subtype=resnet_impala``: channels 16, 32, 32, fc 256), no recurrent core, discount 0.999, learning rate
5e-4, entropy coefficient 0.01, 256-step rollouts, 8 minibatches and 3 epochs per iteration, gradient norm clip
0.5, normalized returns. sfx trains them with APPO (V-trace) where the paper used PPO with GAE (lambda 0.95).
"""

from __future__ import annotations

import argparse
import difflib
from typing import Any

import numpy as np

from sfx.envs.envpool import add_backend_params, check_envpool_cfg, pool_threads, require_envpool
from sfx.envs.envpool.families import check_no_frameskip, seeds_for
from sfx.envs.registry import register_env_family
from sfx.errors import ConfigError

PREFIX = "procgen_"

# game -> its distribution modes, as procgen 0.10.7 defines them (procgen/src/game.cpp; EnvPool registers the same)
PROCGEN_MODES: dict[str, tuple[str, ...]] = {
    "bigfish": ("easy", "hard"),
    "bossfight": ("easy", "hard"),
    "caveflyer": ("easy", "hard", "memory", "exploration"),
    "chaser": ("easy", "hard", "extreme"),
    "climber": ("easy", "hard", "exploration"),
    "coinrun": ("easy", "hard", "exploration"),
    "dodgeball": ("easy", "hard", "extreme", "memory"),
    "fruitbot": ("easy", "hard"),
    "heist": ("easy", "hard", "memory", "exploration"),
    "jumper": ("easy", "hard", "memory", "exploration"),
    "leaper": ("easy", "hard", "extreme", "exploration"),
    "maze": ("easy", "hard", "memory", "exploration"),
    "miner": ("easy", "hard", "memory"),
    "ninja": ("easy", "hard", "exploration"),
    "plunder": ("easy", "hard"),
    "starpilot": ("easy", "hard", "extreme"),
}
PROCGEN_GAMES: tuple[str, ...] = tuple(PROCGEN_MODES)
DISTRIBUTION_MODES = ("easy", "hard", "extreme", "memory", "exploration")

DEFAULT_OVERRIDES: dict[str, Any] = {
    "encoder_type": "resnet",
    "encoder_subtype": "resnet_impala",
    "hidden_size": 256,
    "obs_scale": 255.0,
    "use_rnn": False,
    "gamma": 0.999,
    "learning_rate": 5e-4,
    "exploration_loss_coeff": 0.01,
    "rollout": 256,
    "recurrence": 256,
    "batch_size": 2048,
    "num_batches_per_iteration": 8,
    "ppo_epochs": 3,
    "max_grad_norm": 0.5,
    "normalize_returns": True,
}


def check_game(full_env_name: str) -> str:
    """``procgen_starpilot`` -> ``starpilot``; :class:`ConfigError` (listing the games) for another name."""
    game = full_env_name[len(PREFIX):] if full_env_name.startswith(PREFIX) else full_env_name
    if game in PROCGEN_MODES:
        return game
    close = difflib.get_close_matches(game, PROCGEN_GAMES, n=1, cutoff=0.6)
    hint = f"did you mean {PREFIX}{close[0]}? " if close else ""
    raise ConfigError(f"--env={full_env_name} is not a Procgen game; {hint}allowed: "
                      f"{', '.join(PREFIX + g for g in PROCGEN_GAMES)}")


def distribution_modes(game: str) -> tuple[str, ...]:
    """The distribution modes ``game`` has."""
    return PROCGEN_MODES[game]


def add_procgen_params(parser: argparse.ArgumentParser) -> None:
    """The ``--procgen_*`` flags and the backend flags (EnvPool is the only backend)."""
    g = parser.add_argument_group("procgen_ envs")
    add_backend_params(g, choices=("envpool",), default="envpool")
    g.add_argument("--procgen_distribution_mode", choices=DISTRIBUTION_MODES, default="easy",
                   help="Procgen's level distribution (easy = the paper's easy mode; extreme / memory / exploration "
                        "only in the games that have them)")
    g.add_argument("--procgen_num_levels", type=int, default=0,
                   help="distinct levels to play (200 = the paper's training set); 0 = unbounded")
    g.add_argument("--procgen_start_level", type=int, default=0, help="the first level's seed")


def validate_procgen_cfg(cfg: argparse.Namespace) -> None:
    """:class:`ConfigError` for an unknown game, a mode the game lacks, bad level numbers, or no EnvPool / Qt 5."""
    check_game(cfg.env)
    for flag in ("procgen_num_levels", "procgen_start_level"):
        value = getattr(cfg, flag)
        if not isinstance(value, int) or value < 0:
            raise ConfigError(f"--{flag}={value} must be an integer >= 0")
    require_qt5()
    procgen_options(cfg)


def require_qt5() -> None:
    """:class:`ConfigError` in one line when EnvPool's Procgen cannot load the system Qt 5 runtime."""
    require_envpool()
    try:
        import envpool.procgen  # noqa: F401 (loads the C++ module that links Qt 5)
    except ImportError as e:
        raise ConfigError(f"procgen_ envs need the system Qt 5 runtime (libQt5Core, libQt5Gui), which EnvPool's "
                          f"Procgen cannot load ({e}); on Debian/Ubuntu run scripts/install_qt5.sh as root (apt-get "
                          f"install libqt5gui5), elsewhere install the Qt 5 base libraries") from None


def make_procgen_env(full_env_name: str, cfg: Any, env_config: dict | None = None,
                     render_mode: str | None = None) -> Any:
    """One Procgen game as a one-agent env (a one-env EnvPool pool; the probe, the evaluator and sfx.enjoy use it,
    rollout workers step whole pools through :func:`make_procgen_vector`)."""
    from sfx.envs.envpool.families import VectorAsEnv

    config = dict(env_config or {"worker_index": 0, "vector_index": 0, "env_id": 0})
    return VectorAsEnv(lambda configs: make_procgen_vector(cfg, configs), config)



# ------------------------------------------------------------------------------------ on EnvPool (--env_backend)


def procgen_task_id(game: str, mode: str) -> str:
    """``starpilot``, ``easy`` -> ``StarpilotEasy-v0``."""
    return f"{game.capitalize()}{mode.capitalize()}-v0"


def procgen_options(cfg: Any) -> tuple[str, dict[str, Any]]:
    """``--env`` and the ``--procgen_*`` flags -> (EnvPool task, its config)."""
    game = check_game(cfg.env)
    mode = cfg.procgen_distribution_mode
    modes = distribution_modes(game)
    if mode not in modes:
        raise ConfigError(f"--procgen_distribution_mode={mode} is not one of {cfg.env}'s; allowed: {', '.join(modes)}")
    task = procgen_task_id(game, mode)
    check_envpool_cfg(cfg, task, [PREFIX + g for g in PROCGEN_GAMES])
    check_no_frameskip(cfg, "Procgen's agent step is one game frame and the EnvPool backend does not repeat actions")
    return task, {"num_levels": int(cfg.procgen_num_levels), "start_level": int(cfg.procgen_start_level)}


def _procgen_level_complete(ended: np.ndarray, final_obs: Any, rewards: np.ndarray, terminated: np.ndarray,
                            info: dict) -> list[dict]:
    # EnvPool's prev_level_complete is 1 on the step that completed the level (0 at a death or the time limit)
    return [{"success": float(c)} for c in np.asarray(info["prev_level_complete"])[ended].tolist()]


def make_procgen_vector(cfg: Any, env_configs: list[dict]) -> Any:
    """The ``procgen_`` family's ``make_vector_fn`` (EnvPool is its only backend)."""
    task, options = procgen_options(cfg)
    from sfx.envs.envpool.vector import EnvPoolVector

    return EnvPoolVector(task, seeds_for(cfg, env_configs), options, pool_threads(cfg, len(env_configs)),
                         extra_stats_fn=_procgen_level_complete, name=f"envpool {task}")


def register_family() -> None:
    """Register the ``procgen_`` family (called by the registry on first use of a ``procgen_`` name)."""
    register_env_family(PREFIX, make_procgen_env, add_params_fn=add_procgen_params,
                        default_overrides=DEFAULT_OVERRIDES, validate_fn=validate_procgen_cfg,
                        make_vector_fn=make_procgen_vector)
