"""Env families: a name prefix (``gym_``, ``doom_`` ...) -> how to make the env, its extra flags and defaults.

``--env=gym_CartPole-v1`` belongs to the family whose prefix is the longest one matching the name.
Built-in families are imported only when an env name asks for them, so a missing optional
dependency (vizdoom, ale-py ...) matters only to the users of that family.

Registering your own family (before parsing the command line)::

    def make_my_env(full_env_name, cfg, env_config, render_mode=None):
        return MyGymnasiumEnv(...)   # a gymnasium.Env (wrapped as 1 agent) or a MultiAgentEnv

    register_env_family("my_", make_my_env, add_params_fn=lambda parser: parser.add_argument(...),
                        default_overrides={"encoder_type": "mlp"})

One env under one exact name (no prefix matching)::

    register_env("my_gridworld", make_my_env)   # --env=my_gridworld, and nothing else

A family that serves gymnasium ids under its own names (``minigrid_MemoryS7`` is
``MiniGrid-MemoryS7-v0`` with the family's observation view and defaults) says so with ``gym_id_fn``;
``--env=gym_MiniGrid-MemoryS7-v0`` or ``--env=MiniGrid-MemoryS7-v0`` then answers with the sfx spelling.

A composite env is made of other envs that its own flags name (``--env=multitask
--multitask_envs=atari_pong,atari_breakout``): its ``compose_fn`` reads those flags and returns a
:class:`Composition`; the parser then adds the flags and default overrides of the named envs' families.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

import gymnasium

from sfx.errors import ConfigError
from sfx.envs.multi_agent import MultiAgentEnv, SingleAgentEnvAdapter

log = logging.getLogger(__name__)

MakeEnvFn = Callable[..., Any]  # (full_env_name, cfg, env_config, render_mode=None) -> env
# flag name -> default, for every env of a family, or computed from the env name (per-env defaults)
DefaultOverrides = dict | Callable[[str], dict]
AgentDefaults = dict | Callable[[str], dict]
AddParamsFn = Callable[[argparse.ArgumentParser], None]
ValidateFn = Callable[[argparse.Namespace], None]
# a gymnasium id (``MiniGrid-MemoryS7-v0``, ``ALE/Pong-v5``) -> the env name under which a family serves it, or None
GymIdFn = Callable[[str], "str | None"]
# (cfg, [env_config, ...]) -> sfx.envs.vector.VectorEnv or None (see EnvFamily.make_vector_fn)
MakeVectorFn = Callable[[Any, list], Any]


class Composition(NamedTuple):
    """What a composite env (one made of other envs, e.g. ``multitask``) is made of, as its flags say."""

    # the envs it is made of: their families' flags and default overrides join the parser (where two
    # of them set different defaults for one flag, the first listed env's default holds)
    env_names: tuple[str, ...]
    # the composite's own defaults on top of those (they show in --help; the user can override them)
    default_overrides: dict


# (the values of the flags known so far: the trainer's and the composite family's own) -> Composition
ComposeFn = Callable[[argparse.Namespace], Composition]


@dataclass(frozen=True)
class EnvFamily:
    """One registered family of envs."""

    prefix: str
    make_env_fn: MakeEnvFn
    add_params_fn: AddParamsFn | None = None
    default_overrides: DefaultOverrides = field(default_factory=dict)
    validate_fn: ValidateFn | None = None
    # True: ``prefix`` is one whole env name (register_env), matched only by that exact name
    exact: bool = False
    # a composite env's hook (see :class:`Composition`); None for an env made of no other envs
    compose_fn: ComposeFn | None = None
    # the gymnasium ids this family serves under its own names (see :func:`sfx_names_for_gym_id`)
    gym_id_fn: GymIdFn | None = None
    # --algo name -> {flag: default} for that agent on this family (beat the agent's own and default_overrides),
    # or env_name -> such a dict
    agent_defaults: AgentDefaults = field(default_factory=dict)
    # (cfg, env_configs) -> a VectorEnv stepping those envs natively (e.g. EnvPool), or None to use the Python envs
    # of make_env_fn; see sfx.envs.vector
    make_vector_fn: "MakeVectorFn | None" = None

    def defaults_for(self, env_name: str) -> dict:
        """The flag defaults this family sets for ``env_name`` (a copy)."""
        overrides = self.default_overrides
        return dict(overrides(env_name) if callable(overrides) else overrides)

    def agent_defaults_for(self, env_name: str, algo: str) -> dict:
        """The flag defaults this family sets for ``--algo=algo`` on ``env_name`` (a copy; {} if none)."""
        table = self.agent_defaults(env_name) if callable(self.agent_defaults) else self.agent_defaults
        return dict(table.get(algo, {}))

    def matches(self, env_name: str) -> bool:
        """Whether ``env_name`` belongs to this family (a bare prefix names no env)."""
        if self.exact:
            return env_name == self.prefix
        return env_name.startswith(self.prefix) and len(env_name) > len(self.prefix)


# prefix -> module whose import (then ``register_family()``) registers it; loaded on first use
BUILTIN_FAMILIES: dict[str, str] = {
    "gym_": "sfx.envs.gym",
    "doom_": "sfx.envs.doom",
    "atari_": "sfx.envs.atari",
    "dmlab_": "sfx.envs.dmlab",
    "mujoco_": "sfx.envs.mujoco",
    "minigrid_": "sfx.envs.minigrid",
    "pettingzoo_": "sfx.envs.pettingzoo",
    "football_": "sfx.envs.football",
    "procgen_": "sfx.envs.procgen",
}
# whole env name -> module whose import (then ``register_family()``) registers it with register_env
BUILTIN_ENVS: dict[str, str] = {
    "multitask": "sfx.envs.multitask",
}
class OptionalPackage(NamedTuple):
    """What a built-in family needs beyond sfx's own requirements."""

    extra: str    # the setup.py extra that installs it: ``pip install -e .[doom]``
    module: str   # what the family imports
    package: str  # as pip spells it
    minimum: str  # the oldest version sfx works with (setup.py's pin)


# built-in family prefix -> its optional package (imported when the family is loaded, so that a missing one
# is one line here, not a traceback from wherever the family first touches it)
FAMILY_PACKAGES: dict[str, OptionalPackage] = {
    # vizdoom 1.3 added DoomGame.is_episode_timeout_reached: with 1.2.x every doom env crashes on its first step
    "doom_": OptionalPackage("doom", "vizdoom", "vizdoom", "1.3"),
    "atari_": OptionalPackage("atari", "ale_py", "ale-py", "0.9"),
    "mujoco_": OptionalPackage("mujoco", "mujoco", "mujoco", "3.0"),
    "minigrid_": OptionalPackage("minigrid", "minigrid", "minigrid", "2.3"),
    "pettingzoo_": OptionalPackage("pettingzoo", "pettingzoo", "pettingzoo", "1.27"),
    # Procgen's only backend is EnvPool (sfx.envs.procgen)
    "procgen_": OptionalPackage("envpool", "envpool", "envpool", "1.2.5"),
}


def install_hint(env_name: str) -> str | None:
    """``pip install -e .[doom]`` for an env of a built-in family that has an extra, else None."""
    for prefix, needed in FAMILY_PACKAGES.items():
        if env_name.startswith(prefix):
            return f"pip install -e .[{needed.extra}]"
    return None


def missing_package_message(prefix: str, error: Exception) -> str:
    """One line for a family that cannot be loaded: the family, what failed, and for a built-in family
    with an optional package the extra that installs it."""
    needed = FAMILY_PACKAGES.get(prefix)
    if needed is None:
        return f"env family {prefix} is not available: {error}; install its dependencies"
    return (f"env family {prefix} needs the optional package {needed.package}>={needed.minimum}, which cannot be "
            f"imported ({type(error).__name__}: {error}); install it with: pip install -e .[{needed.extra}] "
            f"(in the sfx checkout; or pip install '{needed.package}>={needed.minimum}')")


def _version_tuple(version: str) -> tuple[int, ...]:
    """``1.2.4`` -> (1, 2, 4); ``2.0.0rc1`` -> (2, 0, 0): the leading numbers of each part."""
    numbers = []
    for part in version.split("."):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        numbers.append(int(digits.group()))
    return tuple(numbers)


def check_package_version(prefix: str, module: Any) -> None:
    """:class:`ConfigError` when a built-in family's package is older than sfx supports (a version that
    would import fine and then crash every env on its first step)."""
    needed = FAMILY_PACKAGES[prefix]
    version = getattr(module, "__version__", None)
    if not isinstance(version, str) or not _version_tuple(version):
        return
    if _version_tuple(version) < _version_tuple(needed.minimum):
        raise ConfigError(f"env family {prefix} needs {needed.package}>={needed.minimum}, found {version}; upgrade "
                          f"it with: pip install -U -e .[{needed.extra}] (or pip install -U "
                          f"'{needed.package}>={needed.minimum}')")


_families: dict[str, EnvFamily] = {}


def register_env_family(prefix: str, make_env_fn: MakeEnvFn, add_params_fn: AddParamsFn | None = None,
                        default_overrides: DefaultOverrides | None = None,
                        validate_fn: ValidateFn | None = None, compose_fn: ComposeFn | None = None,
                        gym_id_fn: GymIdFn | None = None, agent_defaults: AgentDefaults | None = None,
                        make_vector_fn: "MakeVectorFn | None" = None) -> None:
    """Register (or replace) the family of envs whose names start with ``prefix``.

    Args:
        prefix: e.g. ``"gym_"``; env names are ``prefix + rest``.
        make_env_fn: ``(full_env_name, cfg, env_config, render_mode=None)`` -> a :class:`MultiAgentEnv`
            or a gymnasium env (wrapped as one agent with auto-reset).
        add_params_fn: adds the family's own flags to the parser.
        default_overrides: flag name -> default for this family (the user can still override it), or
            a function ``env_name -> {flag: default}`` for defaults that differ between the family's envs
            (e.g. a reward scale per scenario). Either way they show in ``--help`` and are saved in cfg.json.
        validate_fn: ``(cfg) -> None``, raises :class:`ConfigError` on a bad env name or family flag.
        compose_fn: for a composite env only: ``(values of the flags known so far) -> Composition``.
        gym_id_fn: ``(gymnasium id) -> env name of this family or None``, for a family that serves
            gymnasium ids under its own names: a user who types the gymnasium id is told the sfx name.
        agent_defaults: ``{algo: {flag: default}}`` (or ``env_name -> {algo: {flag: default}}``): an agent's
            defaults on this family's envs, e.g. R2D2 settings that learn a classic-control task where the
            agent's own are for Atari; they beat the agent's own and ``default_overrides``, show in ``--help``
            with where they came from, and a command line still overrides them.
        make_vector_fn: ``(cfg, env_configs) -> VectorEnv or None``: a split's envs stepped as one native vector
            (:mod:`sfx.envs.vector`; EnvPool for the families it serves); None from it, or no function, and the
            split steps ``make_env_fn``'s envs one after the other.
    """
    if not prefix or not isinstance(prefix, str):
        raise ValueError(f"an env family prefix must be a non-empty string, got {prefix!r}")
    if prefix in _families:
        log.debug("env family %r registered again: the new one replaces the old", prefix)
    overrides = default_overrides if callable(default_overrides) else dict(default_overrides or {})
    agents = agent_defaults if callable(agent_defaults) else dict(agent_defaults or {})
    _families[prefix] = EnvFamily(prefix, make_env_fn, add_params_fn, overrides, validate_fn, compose_fn=compose_fn,
                                  gym_id_fn=gym_id_fn, agent_defaults=agents, make_vector_fn=make_vector_fn)


def register_env(env_name: str, make_env_fn: MakeEnvFn, add_params_fn: AddParamsFn | None = None,
                 default_overrides: dict | None = None, validate_fn: ValidateFn | None = None,
                 compose_fn: ComposeFn | None = None) -> None:
    """Register (or replace) one env under exactly ``env_name`` (``--env=env_name``; no prefix matching).

    The arguments are those of :func:`register_env_family`; ``make_env_fn`` gets ``env_name`` as its
    first argument. Call it at the top level of a module the worker processes import too (the main
    module, or one named in ``SFX_EXTRA_ENV_MODULES``), before parsing the command line.
    :func:`unregister_env_family` forgets it.
    """
    if not env_name or not isinstance(env_name, str):
        raise ValueError(f"an env name must be a non-empty string, got {env_name!r}")
    old = _families.get(env_name)
    if (old is not None and not old.exact) or env_name in BUILTIN_FAMILIES:
        raise ValueError(f"env name {env_name!r} is already the prefix of an env family; choose another name")
    _families[env_name] = EnvFamily(env_name, make_env_fn, add_params_fn, dict(default_overrides or {}), validate_fn,
                                    exact=True, compose_fn=compose_fn)


def unregister_env_family(prefix: str) -> None:
    """Forget a registered family (tests, notebooks). Built-in ones come back on their next lookup."""
    _families.pop(prefix, None)


# Comma-separated modules that register families on import; read in every process, so envs
# of a plugin module reach the worker processes too (e.g. SFX_EXTRA_ENV_MODULES=bench.image_env).
EXTRA_MODULES_ENV_VAR = "SFX_EXTRA_ENV_MODULES"
_imported_extra: set[str] = set()


def _import_extra_modules() -> None:
    for name in filter(None, (m.strip() for m in os.environ.get(EXTRA_MODULES_ENV_VAR, "").split(","))):
        if name in _imported_extra:
            continue
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ConfigError(f"{EXTRA_MODULES_ENV_VAR} names module {name!r}, which cannot be imported: {e}") from None
        _imported_extra.add(name)


def ensure_registered(family: EnvFamily) -> None:
    """Register ``family`` in this process if it is not there (worker processes get the
    coordinator's family this way, even one registered inside ``if __name__ == '__main__'``)."""
    if _families.get(family.prefix) is not family:
        _families[family.prefix] = family


def registered_prefixes() -> list[str]:
    """Every prefix that can be used: registered ones and the (lazily loaded) built-in ones."""
    _import_extra_modules()
    return sorted(set(_families) | set(BUILTIN_FAMILIES) | set(BUILTIN_ENVS))


def _matches(prefix: str, env_name: str) -> bool:
    if prefix in _families:
        return _families[prefix].matches(env_name)
    if prefix in BUILTIN_ENVS:  # not loaded yet
        return env_name == prefix
    return env_name.startswith(prefix) and len(env_name) > len(prefix)


def find_family(env_name: str) -> EnvFamily:
    """The family of ``env_name`` (longest matching prefix); :class:`ConfigError` if there is none."""
    candidates = [p for p in registered_prefixes() if _matches(p, env_name)]
    if not candidates:
        # a bare gymnasium id: the family that serves it, or the gym_ family
        hint = sfx_names_for_gym_id(env_name) or (["gym_" + env_name] if env_name in gymnasium.registry else [])
        raise ConfigError(f"--env={env_name} matches no env family; names start with one of: "
                          f"{', '.join(registered_prefixes())}" + (f"; did you mean --env={hint[0]}?" if hint else ""))
    prefix = max(candidates, key=len)
    if prefix not in _families:
        _load_builtin(prefix)
    return _families[prefix]


def gym_id_stem(gym_id: str) -> str:
    """A gymnasium id without module, namespace and version, lower case, letters and digits only:
    ``ALE/SpaceInvaders-v5`` -> ``spaceinvaders``, ``mypkg:MiniGrid-MemoryS7-v0`` -> ``minigridmemorys7``."""
    name = gym_id.rpartition(":")[2].rpartition("/")[2]
    name = re.sub(r"-v\d+$", "", name)
    return re.sub(r"[^a-z0-9]", "", name.lower())


def sfx_names_for_gym_id(gym_id: str) -> list[str]:
    """The env names under which families serve the gymnasium id ``gym_id`` (``MiniGrid-MemoryS7-v0`` ->
    ``["minigrid_MemoryS7"]``), as their ``gym_id_fn`` say. Built-in families are loaded for this (an
    error path: a family whose dependencies are missing is skipped)."""
    for prefix in BUILTIN_FAMILIES:
        if prefix not in _families:
            try:
                _load_builtin(prefix)
            except Exception as e:  # noqa: BLE001 - an unavailable family serves nothing
                log.debug("env family %s not loaded while looking up gymnasium id %r: %s", prefix, gym_id, e)
    names = []
    for family in list(_families.values()):
        if family.gym_id_fn is not None:
            name = family.gym_id_fn(gym_id)
            if name:
                names.append(name)
    return names


def _load_builtin(prefix: str) -> None:
    module_name = BUILTIN_FAMILIES.get(prefix) or BUILTIN_ENVS[prefix]
    try:
        if prefix in FAMILY_PACKAGES:
            check_package_version(prefix, importlib.import_module(FAMILY_PACKAGES[prefix].module))
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(missing_package_message(prefix, e)) from None
    module.register_family()
    if prefix not in _families:
        raise RuntimeError(f"{module_name}.register_family() did not register the {prefix!r} family")


def env_seed(cfg: Any, env_config: dict | None) -> int | None:
    """Seed of one env: ``cfg.seed + env_id`` (``None`` when the run is not seeded)."""
    seed = cfg.seed
    if seed is None:
        return None
    env_id = (env_config or {}).get("env_id", 0)
    # env_id is -1 for the probe env the coordinator makes; keep seeds non-negative for gymnasium
    return max(0, int(seed) + int(env_id))


def make_env(cfg: Any, env_config: dict | None = None, render_mode: str | None = None) -> MultiAgentEnv:
    """Make the env named by ``cfg.env``; a single-agent gymnasium env comes back as a 1-agent MultiAgentEnv.

    Args:
        cfg: the parsed config (``cfg.env`` names the env).
        env_config: ``worker_index``, ``vector_index``, ``env_id`` (global index, used for seeding).
        render_mode: passed to the env (``"human"``, ``"rgb_array"`` or ``None``).
    """
    env_config = dict(env_config) if env_config is not None else {"worker_index": 0, "vector_index": 0, "env_id": 0}
    family = find_family(cfg.env)
    env = family.make_env_fn(cfg.env, cfg, env_config, render_mode=render_mode)
    if isinstance(env, MultiAgentEnv):
        return env
    if isinstance(env, gymnasium.Env):
        return SingleAgentEnvAdapter(env, seed=env_seed(cfg, env_config))
    if all(hasattr(env, a) for a in ("num_agents", "reset", "step", "observation_space", "action_space")):
        return env  # duck-typed multi-agent env
    raise TypeError(f"env family {family.prefix!r} returned {type(env).__name__}, "
                    f"expected a MultiAgentEnv or a gymnasium.Env")
