"""The ``pettingzoo_`` family: PettingZoo's multi-agent envs, e.g. ``--env=pettingzoo_classic.tictactoe_v3``.

Names: ``pettingzoo_<group>.<env>`` is the env PettingZoo's registry (PettingZoo >= 1.27) knows as
``<group>/<env>``: ``pettingzoo_sisl.pursuit_v5``, ``pettingzoo_classic.connect_four_v3``,
``pettingzoo_butterfly.knights_archers_zombies_v11``. Without a version (``pettingzoo_classic.tictactoe``)
the newest one is taken. Envs another package registers with ``pettingzoo.register`` work too once that
package is imported (name it in ``SFX_EXTRA_ENV_MODULES``). Flags of the family:

* ``--pettingzoo_kwargs='{"max_cycles": 100}'``: keyword arguments of the env (a JSON object);
* ``--pettingzoo_api=auto|parallel|aec``: auto takes the Parallel API when the env has one (every
  agent acts at every step, so no agent waits), else the AEC (turn-based) API;
* ``--pettingzoo_random_agents=player_2``: agents played inside the env by a uniform random player
  (over the legal actions, when the env gives a mask); sfx does not see them. A fixed opponent to
  measure learning against, or a way to train only the agents that share one space.

sfx agents are the env's ``possible_agents`` in their order (minus the random ones): a fixed
``num_agents``, and one observation space and one action space for all of them (agents whose
spaces differ are refused with a ConfigError naming them: make them random players, or pad).

Observations. A Box stays a Box, except that 0/1 planes (bool, or integers in [0, 1]: the boards of
the classic games) and float64 become float32: sfx reads an integer image as pixels to divide by
``--obs_scale`` and a 1-D integer vector in a Dict as token ids. A Discrete observation becomes its
one-hot. A Dict becomes a Dict of those. When the actions are categorical (Discrete, MultiDiscrete)
the observation always carries ``action_mask`` (an int8 Box(0, 1), one entry per choice, which the
model honours: masked choices get zero probability when acting and in the learner's log-probabilities
and entropy); a Box observation then travels as ``{"observation": ..., "action_mask": ...}``, the
layout of PettingZoo's own masked observations. The acting agent's mask is the env's
(``observation["action_mask"]``, or ``info["action_mask"]``), all ones when the env has none.

Who acts, who sits out. A match is one sfx episode for every sfx agent, from the env's reset to the
step on which the env has no agent left (or, in a Parallel env, only random players): only then is
every agent's ``terminated`` / ``truncated`` set (``truncated`` for an agent whose own end was a
truncation: the learner bootstraps from ``infos[i]['final_obs']``), its ``infos[i]['episode']`` given
(``reward``, ``len``: sfx steps it spent in the match, ``turns``: steps on which it acted (AEC),
``illegal_moves`` with categorical actions: actions the env's own mask forbade, 0 while sfx honours
the masks and for envs without one), and the next match started. Between, an agent that does not act this
step is inactive (``infos[i]['is_active'] = False``: not trained on, its action ignored):

* Parallel API: an agent absent from the env's agents (done before the others, or not joined yet)
  sits out with reward 0 and a zero observation; one that joins late acts from the step after it
  first appears.
* AEC API: one turn per sfx step: the agent of ``env.agent_selection`` acts; the others wait,
  seeing their own ``observe()`` of the board. Random players' turns, and the ``step(None)`` that
  PettingZoo needs to remove each done agent, are played inside the same sfx step, so the turn
  order is the env's.

A sitting-out or waiting agent's mask allows only the first choice of each head, so that agent
takes it with probability 1 both when acting and in the learner: its importance ratio is exactly 1,
and V-trace carries rewards through these steps unchanged (an all-zero row would leave the step
unmasked, with whatever ratio the policy's drift gives it, which V-trace clips at 1 and which then
scales what flows through). Without categorical actions (e.g. multiwalker) there is no mask and
those ratios are only clipped. So an agent killed early still ends its episode with the match:
its sit-out steps bring reward 0 at ratio 1, which (within one trajectory) leaves its returns what
a terminal step at its death would give, and sfx's rule that an agent's next observation after an
episode end is the next episode's (which PettingZoo cannot give one agent alone) holds.

AEC rewards. After every ``env.step`` (the actor's turn, a random player's, a dead step) each sfx
agent gets ``env.rewards[agent]``, the reward of that step (PettingZoo's definition), summed over
the env steps of one sfx step and given on that sfx step, acting or waiting. So when a move ends the
game, the mover gets its reward on its own (active) step and every other agent gets its reward on
the same step, inactive but terminated: inactive steps are transparent in the learner's targets (their
rewards reach the agent's previous active step, a waiting step does not discount, their values are
never read: ``sfx.algo.targets``), so the loser's -1 reaches the value target and advantage of the
loser's last move, discounted by ``--gamma`` once (one decision later) however long it waited. Rewards of
random players' turns before an sfx agent's first turn go to its first step.

Seeding: the first reset uses sfx's per-env seed (``--seed`` + env id), later matches continue the
env's random stream; the random players have their own generator from the same seed. ``render()``
is the env's (``sfx.enjoy`` passes ``render_mode``).
"""

from __future__ import annotations

import argparse
import difflib
import json
from typing import Any

import pettingzoo
from pettingzoo.env_registry.exceptions import FailedToImport

from sfx.errors import ConfigError
from sfx.envs.multi_agent import MultiAgentEnv
from sfx.envs.pettingzoo.aec import PettingZooAECEnv
from sfx.envs.pettingzoo.parallel import PettingZooParallelEnv
from sfx.envs.registry import env_seed, register_env_family

PREFIX = "pettingzoo_"
APIS = ("auto", "parallel", "aec")

# Board games and grid worlds with small observations: an MLP (the conv encoders need large images)
DEFAULT_OVERRIDES: dict[str, Any] = {
    "encoder_type": "mlp",
    "encoder_subtype": "mlp_mujoco",
}


def _all_specs() -> dict[str, Any]:
    """Registry id -> EnvSpec over both of PettingZoo's registries."""
    return {**pettingzoo.aec_registry, **pettingzoo.parallel_registry}


def sfx_name(spec: Any) -> str:
    """An EnvSpec as an sfx env name: ``classic/tictactoe-v3`` -> ``pettingzoo_classic.tictactoe_v3``."""
    version = f"_v{spec.version}" if spec.version is not None else ""
    group = f"{spec.namespace}." if spec.namespace else ""
    return f"{PREFIX}{group}{spec.name}{version}"


def _split_version(name: str) -> tuple[str, int | None]:
    base, sep, version = name.rpartition("_v")
    if sep and version.isdigit():
        return base, int(version)
    base, sep, version = name.rpartition("-v")
    if sep and version.isdigit():
        return base, int(version)
    return name, None


def resolve_spec(full_env_name: str) -> Any:
    """``pettingzoo_classic.tictactoe_v3`` -> PettingZoo's EnvSpec; :class:`ConfigError` (with close matches) if
    PettingZoo has no such env."""
    rest = full_env_name[len(PREFIX):] if full_env_name.startswith(PREFIX) else full_env_name
    specs = _all_specs()
    names = sorted({sfx_name(s) for s in specs.values()})
    if "/" in rest:
        group, _, env = rest.partition("/")
    else:
        group, _, env = rest.rpartition(".")
    if not group or not env:
        close = difflib.get_close_matches(full_env_name, names, n=3, cutoff=0.5)
        close += [n for n in names if n.endswith("." + rest) and n not in close]
        hint = f"; did you mean: {', '.join(close)}?" if close else ""
        raise ConfigError(f"--env={full_env_name}: allowed form {PREFIX}<group>.<env>, e.g. "
                          f"{PREFIX}classic.tictactoe_v3 or {PREFIX}sisl.pursuit_v5{hint}")
    base, version = _split_version(env)
    versions = {s.version: s for s in specs.values() if s.namespace == group and s.name == base}
    if versions:
        if version is None:
            return versions[max(v for v in versions if v is not None)] if None not in versions else versions[None]
        if version in versions:
            return versions[version]
        have = ", ".join(sfx_name(s) for _, s in sorted(versions.items(), key=lambda kv: kv[0] or 0))
        raise ConfigError(f"--env={full_env_name}: PettingZoo {pettingzoo.__version__} has no version v{version} of "
                          f"{group}/{base}; allowed: {have}")
    # close matches by the env's own name (the shared prefix would make every name look alike)
    by_short = {sfx_name(s)[len(PREFIX):]: sfx_name(s) for s in specs.values()}
    in_group = {k.partition(".")[2]: v for k, v in by_short.items() if k.partition(".")[0] == group}
    close = [in_group[c] for c in difflib.get_close_matches(env, list(in_group), n=3, cutoff=0.6)]
    close += [v for k, v in by_short.items() if _split_version(k.partition(".")[2])[0] == base and v not in close]
    groups = sorted({s.namespace for s in specs.values() if s.namespace})
    hint = f"; did you mean: {', '.join(close)}?" if close else ""
    if not in_group:
        hint += f"; its groups: {', '.join(groups)} (pettingzoo.pprint_registry() lists the envs)"
    raise ConfigError(f"--env={full_env_name}: PettingZoo {pettingzoo.__version__} has no env {group}/{env}{hint}")


def choose_api(full_env_name: str, spec: Any, api: str) -> str:
    """``parallel`` or ``aec`` for ``--pettingzoo_api=api``."""
    if api not in APIS:
        raise ConfigError(f"--pettingzoo_api={api} is not known; allowed: {', '.join(APIS)}")
    has_parallel = spec.id in pettingzoo.parallel_registry
    if api == "auto":
        return "parallel" if has_parallel else "aec"
    if api == "parallel" and not has_parallel:
        raise ConfigError(f"--pettingzoo_api=parallel: --env={full_env_name} has no Parallel API; allowed: aec or auto")
    if api == "aec" and spec.id not in pettingzoo.aec_registry:
        raise ConfigError(f"--pettingzoo_api=aec: --env={full_env_name} has no AEC API; allowed: parallel or auto")
    return api


def parse_kwargs(text: str) -> dict[str, Any]:
    """``--pettingzoo_kwargs``: a JSON object -> dict."""
    try:
        kwargs = json.loads(text) if text else {}
    except json.JSONDecodeError as e:
        raise ConfigError(f"--pettingzoo_kwargs={text!r} is not valid JSON ({e}); allowed: a JSON object, e.g. "
                          f"'{{\"max_cycles\": 100}}'") from None
    if not isinstance(kwargs, dict):
        raise ConfigError(f"--pettingzoo_kwargs={text!r} is a JSON {type(kwargs).__name__}; allowed: a JSON object, "
                          f"e.g. '{{\"max_cycles\": 100}}'")
    return kwargs


def parse_random_agents(text: str) -> list[str]:
    """``--pettingzoo_random_agents``: comma-separated agent names -> list (names checked against the env's)."""
    return [a.strip() for a in (text or "").split(",") if a.strip()]


def add_pettingzoo_params(parser: argparse.ArgumentParser) -> None:
    """The family's own flags."""
    g = parser.add_argument_group("pettingzoo_ envs")
    g.add_argument("--pettingzoo_kwargs", default="{}",
                   help="keyword arguments of the env, a JSON object, e.g. '{\"n_pursuers\": 4, \"max_cycles\": 200}'")
    g.add_argument("--pettingzoo_api", choices=APIS, default="auto",
                   help="auto = the Parallel API where the env has one, else AEC (turn-based); parallel; aec")
    g.add_argument("--pettingzoo_random_agents", default="",
                   help="comma-separated agents played by a uniform random player over their legal actions inside "
                        "the env (not trained, not seen by sfx), e.g. player_2")


def validate_pettingzoo_cfg(cfg: argparse.Namespace) -> None:
    """:class:`ConfigError` on an unknown env name or a bad family flag."""
    spec = resolve_spec(cfg.env)
    choose_api(cfg.env, spec, cfg.pettingzoo_api)
    parse_kwargs(cfg.pettingzoo_kwargs)
    if cfg.env_frameskip != 1:
        raise ConfigError(f"--env_frameskip={cfg.env_frameskip} is not supported by {PREFIX} envs; allowed: 1 "
                          f"(PettingZoo envs step one turn or one joint action at a time)")


def make_pettingzoo_env(full_env_name: str, cfg: Any, env_config: dict | None = None,
                        render_mode: str | None = None) -> MultiAgentEnv:
    """Make the PettingZoo env ``full_env_name`` names, as an sfx multi-agent env."""
    spec = resolve_spec(full_env_name)
    api = choose_api(full_env_name, spec, cfg.pettingzoo_api)
    kwargs = parse_kwargs(cfg.pettingzoo_kwargs)
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    try:
        env = pettingzoo.make(api, spec, **kwargs)
    except FailedToImport as e:
        raise ConfigError(f"--env={full_env_name} needs packages that are not installed ({e.__cause__}); "
                          f"pip install 'pettingzoo[{spec.namespace}]'") from None
    except TypeError as e:
        raise ConfigError(f"--env={full_env_name} does not take --pettingzoo_kwargs={cfg.pettingzoo_kwargs}: "
                          f"{e}") from None
    adapter = PettingZooParallelEnv if api == "parallel" else PettingZooAECEnv
    try:
        return adapter(env, full_env_name, parse_random_agents(cfg.pettingzoo_random_agents),
                       seed=env_seed(cfg, env_config))
    except ConfigError:
        env.close()
        raise


def register_family() -> None:
    """Register the ``pettingzoo_`` family (called by the registry on first use of a ``pettingzoo_`` name)."""
    register_env_family(PREFIX, make_pettingzoo_env, add_params_fn=add_pettingzoo_params,
                        default_overrides=DEFAULT_OVERRIDES, validate_fn=validate_pettingzoo_cfg)
