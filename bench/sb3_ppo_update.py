"""Is sfx's PPO update Stable-Baselines3's? One iteration of ``runs/zoo_ppo_halfcheetah.py``'s line against SB3's
PPO with the RL Zoo's HalfCheetah entry, from the same weights on the same rollout, minibatch by minibatch::

    bash bench/setup_sb3.sh                       # once: bench/sb3_venv (SB3, rl_zoo3, MuJoCo)
    python -m bench.sb3_ppo_update                # --steps=512 --episode_steps=200 --seed=0 --tolerance=1e-3

Two halves in two venvs (sfx is never imported next to SB3):

- SB3's (this file run by ``bench/sb3_venv/bin/python`` with ``--side=sb3``): PPO built from the zoo's
  ``HalfCheetah-v4`` entry (``bench/sb3_baseline.py``'s reading of the YAML) on HalfCheetah-v5 with a time limit
  of ``--episode_steps``, so that the rollout holds time-limit ends (SB3 adds ``gamma * V(final obs)`` to such a
  step's reward), and without VecNormalize: the normalisers are the one part of the line the two do differently
  (docs/agents/appo.md), so they are off on both sides here. It collects one rollout of ``--steps`` env steps and
  trains on it (``n_epochs`` passes of minibatches), and saves the weights before and after, the rollout (raw
  rewards, each time-limit step's final observation, behaviour log-probs and values), SB3's advantages and
  returns, and the permutation each epoch drew.
- sfx's (this venv): the model from the run description's flags plus ``--normalize_input=False
  --normalize_returns=False``, loaded with SB3's initial weights; the final observations' values (what sfx's
  policy worker computes when an episode is truncated); the targets with ``iteration_targets``; then the same
  minibatches, in the same order, through ``gather_transitions`` and ``learning_step`` with sfx's optimizer
  (``make_optimizer``).

Printed: the largest differences of the acting values and of the advantages and returns (GAE), and per
parameter the size of SB3's change over the iteration, sfx's, and the size of their difference relative to
SB3's change. Float32 rounding over the iteration's Adam steps leaves ~1e-5 of it; the exit status is 1 when a
parameter's relative difference passes ``--tolerance``: then the two updates are not the same algorithm.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SB3_PYTHON = HERE / "sb3_venv" / "bin" / "python"
ENV_ID = "HalfCheetah-v5"
ZOO_ENTRY = "HalfCheetah-v4"

# SB3's parameter names -> sfx's (ActorCritic with separate actor and critic MLP encoders)
PARAMETER_NAMES = {
    "log_std": "action_log_std",
    "mlp_extractor.policy_net.0.weight": "actor_encoder.net.0.weight",
    "mlp_extractor.policy_net.0.bias": "actor_encoder.net.0.bias",
    "mlp_extractor.policy_net.2.weight": "actor_encoder.net.2.weight",
    "mlp_extractor.policy_net.2.bias": "actor_encoder.net.2.bias",
    "mlp_extractor.value_net.0.weight": "critic_encoder.net.0.weight",
    "mlp_extractor.value_net.0.bias": "critic_encoder.net.0.bias",
    "mlp_extractor.value_net.2.weight": "critic_encoder.net.2.weight",
    "mlp_extractor.value_net.2.bias": "critic_encoder.net.2.bias",
    "action_net.weight": "action_head.weight",
    "action_net.bias": "action_head.bias",
    "value_net.weight": "value_head.weight",
    "value_net.bias": "value_head.bias",
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("::", ":"),
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=512, help="env steps of the rollout (the zoo's n_steps: 512)")
    p.add_argument("--episode_steps", type=int, default=200,
                   help="time limit of an episode, so that the rollout holds truncated episodes (default 200)")
    p.add_argument("--seed", type=int, default=0, help="SB3's seed: initial weights, env and minibatch draws")
    p.add_argument("--tolerance", type=float, default=1e-3,
                   help="largest |sfx's weights - SB3's| / |SB3's change| accepted per parameter (default 1e-3)")
    p.add_argument("--sfx_flags", default="",
                   help="flags appended to the run description's on sfx's side, e.g. --sfx_flags=--adam_eps=1e-6:\n"
                        "a translation that differs from the zoo's must fail the check")
    p.add_argument("--side", choices=("sfx", "sb3"), default="sfx", help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for name in ("steps", "episode_steps"):
        if getattr(args, name) < 2:
            p.error(f"--{name}={getattr(args, name)}: expected an integer >= 2")
    if not args.tolerance > 0:
        p.error(f"--tolerance={args.tolerance}: expected a number > 0")
    return args


# ------------------------------------------------------------------------------------------ SB3's half


def sb3_side(args: argparse.Namespace) -> None:
    """Runs in bench/sb3_venv: one PPO iteration, everything it saw and did saved to ``args.out`` (.npz)."""
    sys.path.insert(0, str(HERE))
    import sb3_baseline as zoo  # the YAML reading of the reference runs; imports nothing of sfx

    gymnasium, np, rl_zoo3, stable_baselines3, torch, yaml = zoo.import_stack()
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback

    torch.set_num_threads(1)
    _, _, entry = zoo.load_zoo_entry(rl_zoo3, yaml, "ppo", ENV_ID, ZOO_ENTRY)
    recipe = zoo.resolve(entry, PPO, torch)
    kwargs = dict(recipe["algo_kwargs"])
    policy = kwargs.pop("policy")
    kwargs["n_steps"] = args.steps
    env = gymnasium.make(ENV_ID, max_episode_steps=args.episode_steps)
    model = PPO(policy, env, seed=args.seed, device="cpu", **kwargs)
    print(f"SB3 {stable_baselines3.__version__}, rl_zoo3 {rl_zoo3.__version__}: PPO({policy}, {ENV_ID}, "
          f"time limit {args.episode_steps}) with the zoo's {ZOO_ENTRY} entry but normalize "
          f"({recipe['normalize']} in the zoo: off here), n_steps {args.steps}", flush=True)

    before = {k: v.detach().clone().numpy() for k, v in model.policy.state_dict().items()}
    raw_rewards, truncated, terminated, final_obs = [], [], [], []
    perms = []
    draw = np.random.permutation

    def recorded_permutation(n):  # RolloutBuffer.get draws one per epoch
        perm = draw(n)
        perms.append(np.array(perm, copy=True))
        return perm

    class Record(BaseCallback):
        def _on_step(self) -> bool:
            # before SB3 adds gamma * V(final obs) to a truncated step's reward
            info, done = self.locals["infos"][0], bool(self.locals["dones"][0])
            raw_rewards.append(float(self.locals["rewards"][0]))
            trunc = done and bool(info.get("TimeLimit.truncated", False))
            truncated.append(trunc)
            terminated.append(done and not trunc)
            final_obs.append(np.asarray(info["terminal_observation"], np.float32) if trunc
                             else np.zeros(env.observation_space.shape, np.float32))
            return True

    saved = {}
    train = model.train

    def recorded_train():
        buf = model.rollout_buffer
        for name in ("observations", "actions", "rewards", "values", "log_probs", "advantages", "returns"):
            saved[name] = np.array(getattr(buf, name)[:, 0], copy=True)
        saved["next_obs"] = np.array(model._last_obs[0], np.float32)
        np.random.permutation = recorded_permutation
        try:
            train()
        finally:
            np.random.permutation = draw

    model.train = recorded_train
    model.learn(total_timesteps=args.steps, callback=Record())
    after = {k: v.detach().clone().numpy() for k, v in model.policy.state_dict().items()}
    np.savez(args.out, perms=np.stack(perms), raw_rewards=np.array(raw_rewards, np.float32),
             truncated=np.array(truncated), terminated=np.array(terminated), final_obs=np.stack(final_obs),
             action_low=env.action_space.low, action_high=env.action_space.high,
             n_epochs=kwargs.get("n_epochs", 10), batch_size=kwargs.get("batch_size", 64),
             **{"before/" + k: v for k, v in before.items()}, **{"after/" + k: v for k, v in after.items()},
             **{"rollout/" + k: v for k, v in saved.items()})


# ------------------------------------------------------------------------------------------ sfx's half


def run_sb3_side(args: argparse.Namespace, out: str) -> None:
    if not SB3_PYTHON.exists():
        sys.exit(f"{SB3_PYTHON} is missing: create it with bash bench/setup_sb3.sh")
    cmd = [str(SB3_PYTHON), str(Path(__file__).resolve()), "--side=sb3", f"--out={out}", f"--steps={args.steps}",
           f"--episode_steps={args.episode_steps}", f"--seed={args.seed}"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in done.stdout.splitlines():
        if not line.startswith("WARNING: compiler attribute"):  # MuJoCo's deprecation note on every make
            print(line)
    if done.returncode:
        sys.exit(f"SB3's half failed (exit {done.returncode}): {shlex.join(cmd)}")


def sfx_iteration(d: dict, flags: list[str]) -> tuple[dict, dict]:
    """sfx's APPO on ``d`` (the arrays SB3's half saves: ``before/<SB3 name>``, ``rollout/*``, ``raw_rewards``,
    ``truncated``, ``terminated``, ``final_obs``, ``perms``, ``action_low`` / ``action_high``) with ``flags``
    (sfx.train's): the model loaded with ``before/``, the truncation values and targets, then one minibatch step
    per ``--batch_size`` slice of each permutation, in order.

    Returns:
        ``(weights after, by SB3's names; checks)``: ``checks`` has the largest ``|sfx - SB3|`` of the acting
        values (``values``), the advantages and returns (``advantages``, ``returns``), and ``steps``.
    """
    import gymnasium
    import numpy as np
    import torch

    from sfx.agents.appo import iteration_targets, learning_step, make_optimizer
    from sfx.algo.minibatches import gather_transitions
    from sfx.registries import parse_args as sfx_parse_args
    from sfx.models.actor_critic import create_actor_critic

    cfg = sfx_parse_args(flags, resume=False)
    if (cfg.ppo_epochs, cfg.batch_size) != (len(d["perms"]), int(d["batch_size"])):
        raise SystemExit(f"sfx's flags train {cfg.ppo_epochs} epochs of minibatches of {cfg.batch_size}, SB3 "
                         f"{len(d['perms'])} of {int(d['batch_size'])}")
    obs_space = gymnasium.spaces.Box(-np.inf, np.inf, d["rollout/observations"].shape[1:], np.float32)
    action_space = gymnasium.spaces.Box(d["action_low"], d["action_high"], dtype=np.float32)
    model = create_actor_critic(cfg, obs_space, action_space)
    if set(model.state_dict()) != set(PARAMETER_NAMES.values()):
        raise SystemExit(f"sfx's model has parameters {sorted(model.state_dict())}, this bench maps "
                         f"{sorted(PARAMETER_NAMES.values())}")
    model.load_state_dict({ours: torch.as_tensor(d["before/" + theirs]) for theirs, ours in PARAMETER_NAMES.items()})
    optimizer = make_optimizer(cfg, model)

    T = len(d["raw_rewards"])
    obs = torch.as_tensor(np.concatenate([d["rollout/observations"], d["rollout/next_obs"][None]])).float()[None]
    truncated = torch.as_tensor(d["truncated"])[None]
    terminated = torch.as_tensor(d["terminated"])[None]
    none = torch.zeros(1, T, dtype=torch.bool)
    with torch.no_grad():
        out = model.forward_trajectories({"obs": obs}, torch.zeros(1, T + 1, 0), none, T, None, None)
        finals = model.forward_step(torch.as_tensor(d["final_obs"]).float(), torch.zeros(T, 1))["values"]
    # what the policy worker writes for a truncated step: V(final obs) with the weights that acted
    trunc_values = torch.where(truncated, finals[None], 0.0)
    checks = {"values": float((out.values[0] - torch.as_tensor(d["rollout/values"])).abs().max())}
    data = {"obs": {"obs": obs}, "rnn_states": torch.zeros(1, T + 1, 0),
            "actions": torch.as_tensor(d["rollout/actions"]).float()[None],
            "rewards": torch.as_tensor(d["raw_rewards"]).float()[None], "terminated": terminated,
            "truncated": truncated, "trunc_values": trunc_values, "active": torch.ones(1, T, dtype=torch.bool),
            "policy_versions": torch.zeros(1, T, dtype=torch.int64), "task": torch.zeros(1, dtype=torch.int64),
            "memory": torch.zeros(1, 0, 0), "log_probs": torch.as_tensor(d["rollout/log_probs"]).float()[None],
            "values": torch.as_tensor(d["rollout/values"]).float()[None], "action_params": out.action_params.detach()}
    valids = torch.ones(1, T, dtype=torch.bool)
    targets = iteration_targets(model, data, valids, cfg)
    checks["advantages"] = float((targets.advantages[0] - torch.as_tensor(d["rollout/advantages"])).abs().max())
    checks["returns"] = float((targets.returns[0] - torch.as_tensor(d["rollout/returns"])).abs().max())
    data = {**data, "target_returns": targets.returns, "target_advantages": targets.advantages}
    steps = 0
    for perm in d["perms"]:
        for start in range(0, T, cfg.batch_size):
            step = torch.as_tensor(perm[start:start + cfg.batch_size]).long()
            mb = gather_transitions(data, torch.zeros_like(step), step)
            learning_step(model, optimizer, mb, valids[0, step].unsqueeze(1), cfg)
            steps += 1
    checks["steps"] = steps
    state = model.state_dict()
    return {theirs: state[ours].detach().clone() for theirs, ours in PARAMETER_NAMES.items()}, checks


def compare(d: dict, after: dict) -> list[tuple[str, float, float, float, float]]:
    """Per parameter (SB3's name): |SB3's change|, |sfx's change|, |sfx - SB3|, and the last over the first."""
    import torch

    rows = []
    for name in PARAMETER_NAMES:
        before, reference = torch.as_tensor(d["before/" + name]), torch.as_tensor(d["after/" + name])
        change, diff = float((reference - before).norm()), float((after[name] - reference).norm())
        rows.append((name, change, float((after[name] - before).norm()), diff, diff / max(change, 1e-30)))
    return rows


def sfx_side(args: argparse.Namespace) -> int:
    import numpy as np
    import torch

    from runs.zoo_ppo_halfcheetah import CMD

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "sb3.npz")
        run_sb3_side(args, out)
        with np.load(out) as f:
            d = {k: f[k] for k in f.files}
    torch.set_num_threads(1)
    flags = (shlex.split(CMD)[3:] + ["--normalize_input=False", "--normalize_returns=False", "--device=cpu"]
             + shlex.split(args.sfx_flags))
    after, checks = sfx_iteration(d, flags)
    T = len(d["raw_rewards"])
    print(f"rollout: {T} env steps, {int(d['truncated'].sum())} truncated episode ends, "
          f"{int(d['terminated'].sum())} terminal; {len(d['perms'])} epochs, {checks['steps']} minibatch steps")
    print(f"largest |sfx - SB3|: acting values {checks['values']:.2e}, advantages {checks['advantages']:.2e}, "
          f"returns {checks['returns']:.2e}")
    print(f"{'parameter (SB3 name)':36s} {'|SB3 change|':>12s} {'|sfx change|':>12s} {'|sfx - SB3|':>12s} "
          f"{'relative':>9s}")
    rows = compare(d, after)
    for name, change, ours, diff, rel in rows:
        print(f"{name:36s} {change:12.3e} {ours:12.3e} {diff:12.3e} {rel:9.1e}")
    worst = max(row[-1] for row in rows)
    same = worst <= args.tolerance
    print(f"largest relative difference {worst:.1e}: "
          + ("the same update (float32 rounding)" if same else f"above --tolerance={args.tolerance}: NOT the same"))
    return 0 if same else 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.side == "sb3":
        if not args.out:
            sys.exit("--side=sb3 needs --out")
        sb3_side(args)
        return 0
    return sfx_side(args)


if __name__ == "__main__":
    sys.exit(main())
