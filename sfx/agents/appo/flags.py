"""APPO's flags, their validation, and :class:`APPOConfig`, the typed config its learning step reads (built once
from cfg at the agent's boundary: when a learner starts, and when new hyperparameters come in)."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, fields
from typing import Any, Mapping

import torch

from sfx.agents.base import trajectories_per_batch
from sfx.algo.appo import ADVANTAGE_ESTIMATORS, POLICY_LOSSES, REPLAYED_LOSSES, APPOParams
from sfx.algo.distributions import DiagGaussian, action_params_size, make_action_distribution
from sfx.algo.policy_losses import VMPO_KL_BOUNDS
from sfx.cfg.flag_types import add_bool_arg
from sfx.errors import ConfigError

__all__ = ["APPOConfig", "MINIBATCH_UNITS", "add_appo_flags", "advantage_estimator", "check_vmpo_kl_bounds",
           "minibatch_unit", "replay_needs_features", "replay_specs", "running_advantage_normalization",
           "trajectories_per_iteration", "validate_appo_cfg"]

MINIBATCH_UNITS = ("auto", "trajectories", "transitions")


def advantage_estimator(cfg: Any) -> str:
    """The estimator in effect: ``--advantage_estimator``, or with ``auto`` V-trace if ``--with_vtrace`` else GAE."""
    return _params(cfg).estimator


def trajectories_per_iteration(cfg: Any) -> int:
    """Fresh trajectories of one training iteration: ``--num_batches_per_iteration`` minibatches."""
    return trajectories_per_batch(cfg) * cfg.num_batches_per_iteration


def minibatch_unit(cfg: Any) -> str:
    """``--minibatch_unit`` in effect: ``trajectories`` or ``transitions`` (``auto``: trajectories)."""
    return "trajectories" if cfg.minibatch_unit == "auto" else cfg.minibatch_unit


def running_advantage_normalization(cfg: Any) -> bool:
    """Whether ``--advantage_normalization`` resolves to ``running`` (``auto``: yes, except with ``--popart``)."""
    mode = cfg.advantage_normalization
    return mode == "running" or (mode == "auto" and not cfg.popart)


def _params(cfg: Any) -> APPOParams:
    return APPOParams(**{f.name: getattr(cfg, f.name) for f in fields(APPOParams)})


@dataclass(frozen=True)
class APPOConfig:
    """What APPO's learning step reads, typed and resolved: built from cfg by :meth:`from_cfg` when a learner
    starts and again when new hyperparameters come in (PBT, a resumed run's flags), never per step.

    Attributes:
        params: the loss terms' and targets' hyperparameters (:class:`~sfx.algo.appo.APPOParams`).
        recurrence: steps of each backpropagation-through-time chunk (``--recurrence``); None without a recurrent
            core (``--use_rnn=False``): whole trajectories.
        normalize_returns: ``--normalize_returns``.
        max_grad_norm: ``--max_grad_norm`` (``<= 0``: measured, not clipped).
        aux_coefficients: the auxiliary terms' coefficients by term name (``aux_reconstruction``,
            ``aux_future_pred``).
        clear_coefficients: CLEAR's cloning terms' coefficients (``clear_policy_cloning``,
            ``clear_value_cloning``).
        trajectories_per_minibatch: ``--batch_size / --rollout``.
        batch_size: ``--batch_size`` (samples; transitions with ``--minibatch_unit=transitions``).
        ppo_epochs: ``--ppo_epochs``.
        minibatch_unit: ``trajectories`` or ``transitions`` (``auto`` resolved).
    """

    params: APPOParams
    recurrence: int | None
    normalize_returns: bool
    max_grad_norm: float
    aux_coefficients: Mapping[str, float]
    clear_coefficients: Mapping[str, float]
    trajectories_per_minibatch: int
    batch_size: int
    ppo_epochs: int
    minibatch_unit: str

    @classmethod
    def from_cfg(cls, cfg: Any) -> APPOConfig:
        return cls(params=_params(cfg), recurrence=cfg.recurrence if cfg.use_rnn else None,
                   normalize_returns=bool(cfg.normalize_returns), max_grad_norm=cfg.max_grad_norm,
                   aux_coefficients={"aux_reconstruction": cfg.aux_loss_reconstruction_coeff,
                                     "aux_future_pred": cfg.aux_loss_future_pred_coeff},
                   clear_coefficients={"clear_policy_cloning": cfg.clear_policy_coeff,
                                       "clear_value_cloning": cfg.clear_value_coeff},
                   trajectories_per_minibatch=trajectories_per_batch(cfg), batch_size=cfg.batch_size,
                   ppo_epochs=cfg.ppo_epochs, minibatch_unit=minibatch_unit(cfg))


def add_appo_flags(g: argparse._ActionsContainer) -> None:
    """APPO's flags (Sample Factory 1.x names and defaults)."""
    _add_batch_and_target_flags(g)
    _add_policy_loss_flags(g)
    _add_loss_and_schedule_flags(g)
    _add_replay_flags(g)


def _add_batch_and_target_flags(g: argparse._ActionsContainer) -> None:
    g.add_argument("--num_batches_per_iteration", type=int, default=1,
                   help="minibatches the learner collects before each training iteration")
    g.add_argument("--ppo_epochs", type=int, default=1, help="passes over each iteration's data")
    g.add_argument("--minibatch_unit", choices=list(MINIBATCH_UNITS), default="auto",
                   help="what a minibatch of --batch_size samples is made of: trajectories = whole trajectories of "
                        "--rollout steps (Sample Factory's APPO; the targets are recomputed with the current weights "
                        "for every minibatch); transitions = single steps shuffled across all the iteration's "
                        "trajectories each epoch (PPO as OpenAI Baselines and Stable-Baselines3 run it), their "
                        "targets computed once per iteration over whole trajectories with the weights at its start; "
                        "needs a model without a recurrent core (--use_rnn=False, no memory core) and no auxiliary "
                        "losses. auto = trajectories")
    g.add_argument("--gae_lambda", type=float, default=0.95,
                   help="GAE lambda (used by the GAE estimator: --advantage_estimator=gae, or auto with "
                        "--with_vtrace=False), in [0, 1]")
    add_bool_arg(g, "with_vtrace", True, "V-trace off-policy correction (IMPALA); False = GAE. Read only with "
                                         "--advantage_estimator=auto")
    g.add_argument("--advantage_estimator", choices=list(ADVANTAGE_ESTIMATORS), default="auto",
                   help="value targets and advantages (the choices of Andrychowicz et al. 2021, 'What Matters in "
                        "On-Policy RL'): auto = vtrace with --with_vtrace, else gae (the command lines written "
                        "before this flag keep their meaning); gae = GAE with --gae_lambda; vtrace = V-trace with "
                        "--vtrace_rho/--vtrace_c/--vtrace_lambda; nstep = N-step returns, --n_step of the agent's "
                        "steps then the value; mc = Monte-Carlo returns to the episode's end (bootstrapped from the "
                        "value where the rollout ends first: GAE with lambda 1). All but vtrace take the samples as "
                        "on-policy. A time limit bootstraps, a termination does not, for every estimator")
    g.add_argument("--n_step", type=int, default=5,
                   help="with --advantage_estimator=nstep: rewards (agent steps) summed before bootstrapping from the "
                        "value, >= 1 (1 = one-step TD; >= --rollout = mc)")


def _add_policy_loss_flags(g: argparse._ActionsContainer) -> None:
    g.add_argument("--policy_loss", choices=list(POLICY_LOSSES), default="ppo",
                   help="policy loss on the advantages (Andrychowicz et al. 2021's choices): ppo = PPO's clipped "
                        "surrogate (--ppo_clip_ratio); vpg = vanilla policy gradient -A log pi (no ratio, no clip); "
                        "awr = advantage-weighted regression, -min(exp(A / --awr_beta), --awr_max_weight) log pi "
                        "(Peng et al. 2019); vmpo = V-MPO (Song et al. 2019): top-half advantages weighted by a "
                        "softmax at a learned temperature bounded by --vmpo_eps_eta, and a KL(behaviour || current) "
                        "constraint with learned Lagrange multipliers (--vmpo_kl_bounds)")
    g.add_argument("--awr_beta", type=float, default=1.0,
                   help="AWR temperature beta, > 0, in the units of the advantages the loss sees (normalized ones: "
                        "--advantage_normalization)")
    g.add_argument("--awr_max_weight", type=float, default=20.0,
                   help="AWR: clip of the weights exp(A / beta), > 0 (the AWR paper's 20)")
    g.add_argument("--vmpo_eps_eta", type=float, default=0.01,
                   help="V-MPO: bound on the KL of the top-half weights from uniform (nats), > 0; the temperature "
                        "eta is learned to meet it")
    g.add_argument("--vmpo_eps_alpha", type=float, default=0.005,
                   help="V-MPO: bound on the mean KL(behaviour || current policy) per sample (nats), > 0; the "
                        "multiplier alpha is learned to meet it")
    g.add_argument("--vmpo_kl_bounds", choices=list(VMPO_KL_BOUNDS), default="single",
                   help="V-MPO's KL constraint: single = one bound --vmpo_eps_alpha on the whole KL (any action space; "
                        "what the on-policy study trained); decoupled = Song et al. 2019's appendix for Gaussian "
                        "policies: the mean's part (covariance held at the behaviour's) bounded by "
                        "--vmpo_eps_alpha_mu and the covariance's part (mean held) by --vmpo_eps_alpha_sigma, each "
                        "with its own multiplier starting at --vmpo_init_alpha; continuous (Box) actions only")
    g.add_argument("--vmpo_eps_alpha_mu", type=float, default=0.005,
                   help="V-MPO, --vmpo_kl_bounds=decoupled: bound on the mean's part of the KL per sample (nats), > 0")
    g.add_argument("--vmpo_eps_alpha_sigma", type=float, default=5e-5,
                   help="V-MPO, --vmpo_kl_bounds=decoupled: bound on the covariance's part of the KL per sample "
                        "(nats), > 0; far below the mean's, so the exploration noise shrinks slowly")
    g.add_argument("--vmpo_init_eta", type=float, default=1.0, help="V-MPO: initial temperature eta, > 0")
    g.add_argument("--vmpo_init_alpha", type=float, default=5.0,
                   help="V-MPO: initial KL multiplier alpha (each of alpha_mu and alpha_sigma with decoupled bounds), "
                        "> 0")


def _add_loss_and_schedule_flags(g: argparse._ActionsContainer) -> None:
    g.add_argument("--vtrace_rho", type=float, default=1.0, help="V-trace rho-bar: clip of the importance weights")
    g.add_argument("--vtrace_c", type=float, default=1.0, help="V-trace c-bar: clip of the trace-cutting weights")
    g.add_argument("--vtrace_lambda", type=float, default=1.0,
                   help="V-trace lambda, in [0, 1]: multiplies every trace-cutting weight, c_i = lambda min(c-bar, "
                        "rho_i) (IMPALA's remark 2; trfl's and SEED RL's lambda_), trading the targets' variance for "
                        "bias as GAE's lambda does; 1 = plain V-trace")
    g.add_argument("--ppo_clip_ratio", type=float, default=0.1, help="PPO ratio clip: ratio kept in [1-x, 1+x]")
    g.add_argument("--ppo_clip_value", type=float, default=1.0,
                   help="PPO value clip around the old value; <= 0 disables value clipping")
    g.add_argument("--exploration_loss", choices=["entropy", "symmetric_kl"], default="entropy",
                   help="exploration term: entropy = an entropy bonus; symmetric_kl = a penalty on the symmetric KL "
                        "divergence from the uniform policy (discrete actions; Sample Factory's VizDoom setting)")
    g.add_argument("--exploration_loss_coeff", type=float, default=0.003, help="coefficient of the exploration term")
    g.add_argument("--value_loss_coeff", type=float, default=0.5, help="value loss coefficient")
    g.add_argument("--advantage_normalization", choices=["auto", "running", "minibatch"], default="auto",
                   help="how advantages are scaled before the policy loss: all subtract the minibatch's mean; "
                        "running = divide by the std of all advantages so far (the step shrinks as advantages "
                        "shrink to noise once the policy is good), minibatch = by the minibatch's own std "
                        "(PPO's and Sample Factory's way, which keeps taking full-size steps on noise: "
                        "docs/appendix/agents_flag_notes.md); auto = running, but minibatch with --popart "
                        "(PopArt rescales each task's advantages by its sigma, which changes units while it "
                        "learns: a statistic over the whole run would mix them)")
    g.add_argument("--kl_loss_coeff", type=float, default=0.0,
                   help="coefficient of KL(behaviour || current) penalty; 0 = off")
    g.add_argument("--lr_schedule_kl_threshold", type=float, default=0.008,
                   help="--lr_schedule=kl_adaptive_*: the KL(behaviour || current) the learning rate is steered to "
                        "(nats per sample; lowered above 2x it, raised below half of it)")
    g.add_argument("--lr_adaptive_min", type=float, default=1e-6,
                   help="--lr_schedule=kl_adaptive_*: the lowest learning rate it may set")
    g.add_argument("--lr_adaptive_max", type=float, default=1e-2,
                   help="--lr_schedule=kl_adaptive_*: the highest learning rate it may set")


def _add_replay_flags(g: argparse._ActionsContainer) -> None:
    g.add_argument("--replay_parameters", default=None,
                   help="experience replay mixed into each batch, the V-trace replay platform's JSON list, e.g. "
                        "'[{\"type\": \"queue\", \"capacity\": 1, \"sample_ratio\": 0.5}, {\"type\": \"standard\", "
                        "\"capacity\": 1000, \"sample_ratio\": 0.5}]': each buffer gives int(batch x sample_ratio) "
                        "trajectories (ratios sum to 1); queue = the fresh stream, standard = uniform from the last "
                        "capacity trajectories, custom = attentive / elite sampling by feature distance "
                        "(docs/agents/replay.md). None = no replay")
    g.add_argument("--replayed_loss", choices=list(REPLAYED_LOSSES), default="ppo",
                   help="how replayed samples (--replay_parameters) are trained: ppo = like fresh ones, PPO's ratio "
                        "clip and the value clip around the value recorded when they were acted (many versions old: "
                        "the clips leave a share of them without gradient, TensorBoard's clip/*_replayed); impala = "
                        "the V-trace replay platform's IMPALA loss on them: -A log pi with V-trace's rho-clipped "
                        "advantages and an unclipped value loss (fresh samples keep PPO's). Needs --policy_loss=ppo "
                        "and a replaying buffer")
    g.add_argument("--clear_policy_coeff", type=float, default=0.0,
                   help="CLEAR policy cloning on replayed samples: coefficient of KL(behaviour || current); 0 = off")
    g.add_argument("--clear_value_coeff", type=float, default=0.0,
                   help="CLEAR value cloning on replayed samples: coefficient of (V - V_behaviour)^2; 0 = off")


def check_vmpo_kl_bounds(cfg: Any, action_space: Any) -> None:
    """ConfigError unless ``--vmpo_kl_bounds=decoupled`` (with ``--policy_loss=vmpo``) meets Gaussian actions: its
    two parts of the KL are a Gaussian's mean and covariance."""
    if cfg.policy_loss != "vmpo" or cfg.vmpo_kl_bounds != "decoupled":
        return
    dist = make_action_distribution(action_space, torch.zeros(1, action_params_size(action_space)))
    if not isinstance(dist, DiagGaussian):
        raise ConfigError(f"--vmpo_kl_bounds=decoupled bounds a Gaussian's mean and covariance apart; this env's "
                          f"action space {action_space} is not continuous; allowed: a Box action space, or "
                          f"--vmpo_kl_bounds=single")


def validate_appo_cfg(cfg: Any) -> None:
    """:class:`~sfx.errors.ConfigError` (one line) on a bad value of APPO's flags or a combination it cannot
    train."""
    _validate_iteration(cfg)
    _validate_choices(cfg)
    _validate_numbers(cfg)
    _validate_replay(cfg)


def _validate_iteration(cfg: Any) -> None:
    if not (cfg.lr_schedule_kl_threshold > 0 and math.isfinite(cfg.lr_schedule_kl_threshold)):
        raise ConfigError(f"--lr_schedule_kl_threshold={cfg.lr_schedule_kl_threshold} must be a finite number > 0")
    if not (0 < cfg.lr_adaptive_min <= cfg.lr_adaptive_max < math.inf):
        raise ConfigError(f"--lr_adaptive_min={cfg.lr_adaptive_min} and --lr_adaptive_max={cfg.lr_adaptive_max} must "
                          f"be finite with 0 < min <= max")
    for name in ("num_batches_per_iteration", "ppo_epochs"):
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"--{name}={value} must be a positive integer (> 0)")
    steps = cfg.num_batches_per_iteration * cfg.ppo_epochs
    if steps >= cfg.max_policy_lag:
        # every minibatch step is a new policy version: what the workers collect while one iteration trains is
        # that many versions old when the next one starts, and would all be dropped as too old
        raise ConfigError(f"--num_batches_per_iteration={cfg.num_batches_per_iteration} x --ppo_epochs={cfg.ppo_epochs}"
                          f" = {steps} minibatch steps (policy versions) per iteration, but --max_policy_lag="
                          f"{cfg.max_policy_lag}: samples collected during one iteration would be too old for the "
                          f"next; raise --max_policy_lag to several times {steps} (samples often wait 2-3 iterations)")


def _validate_choices(cfg: Any) -> None:
    if cfg.minibatch_unit not in MINIBATCH_UNITS:
        raise ConfigError(f"--minibatch_unit={cfg.minibatch_unit} is not known; allowed: {', '.join(MINIBATCH_UNITS)}")
    if minibatch_unit(cfg) == "transitions":
        # a transition alone cannot be replayed through a recurrent core or a sequence of frames
        needs = {"--use_rnn": cfg.use_rnn, "--aux_loss_reconstruction_coeff": cfg.aux_loss_reconstruction_coeff,
                 "--aux_loss_future_pred_coeff": cfg.aux_loss_future_pred_coeff}
        bad = [f"{name}={value}" for name, value in needs.items() if value]
        if bad:
            raise ConfigError(f"--minibatch_unit=transitions shuffles single steps, which a recurrent core and the "
                              f"auxiliary losses cannot train on ({', '.join(bad)}); allowed: --use_rnn=False and both "
                              f"auxiliary coefficients 0 with transitions, or --minibatch_unit=trajectories")
    if cfg.advantage_estimator not in ADVANTAGE_ESTIMATORS:
        raise ConfigError(f"--advantage_estimator={cfg.advantage_estimator} is not known; allowed: "
                          f"{', '.join(ADVANTAGE_ESTIMATORS)}")
    if cfg.policy_loss not in POLICY_LOSSES:
        raise ConfigError(f"--policy_loss={cfg.policy_loss} is not known; allowed: {', '.join(POLICY_LOSSES)}")
    if cfg.replayed_loss not in REPLAYED_LOSSES:
        raise ConfigError(f"--replayed_loss={cfg.replayed_loss} is not known; allowed: {', '.join(REPLAYED_LOSSES)}")
    if not isinstance(cfg.n_step, int) or isinstance(cfg.n_step, bool) or cfg.n_step < 1:
        raise ConfigError(f"--n_step={cfg.n_step} must be an integer >= 1")
    if cfg.vmpo_kl_bounds not in VMPO_KL_BOUNDS:
        raise ConfigError(f"--vmpo_kl_bounds={cfg.vmpo_kl_bounds} is not known; allowed: {', '.join(VMPO_KL_BOUNDS)}")


def _validate_numbers(cfg: Any) -> None:
    for name in ("vtrace_rho", "vtrace_c", "ppo_clip_ratio", "awr_beta", "awr_max_weight", "vmpo_eps_eta",
                 "vmpo_eps_alpha", "vmpo_eps_alpha_mu", "vmpo_eps_alpha_sigma", "vmpo_init_eta", "vmpo_init_alpha"):
        value = getattr(cfg, name)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not (value > 0 and math.isfinite(value)):
            raise ConfigError(f"--{name}={value} must be a finite number > 0")
    for name in ("gae_lambda", "vtrace_lambda"):
        if not 0.0 <= getattr(cfg, name) <= 1.0:
            raise ConfigError(f"--{name}={getattr(cfg, name)} must be in [0, 1]")
    for name in ("exploration_loss_coeff", "value_loss_coeff", "kl_loss_coeff", "clear_policy_coeff",
                 "clear_value_coeff"):
        value = getattr(cfg, name)
        if not (value >= 0 and math.isfinite(value)):
            raise ConfigError(f"--{name}={value} must be a finite number >= 0")


def _validate_replay(cfg: Any) -> None:
    specs = replay_specs(cfg)
    if specs:
        from sfx.algo.replay_parameters import batch_composition

        # every buffer's share of a batch must be whole (the platform's rule): a ConfigError naming it now
        batch_composition(specs, trajectories_per_iteration(cfg))
    replays = any(s.type != "queue" for s in specs)
    estimator = advantage_estimator(cfg)
    if replays and estimator != "vtrace":
        # GAE (N-step, MC) takes every sample as on-policy: replayed trajectories, many versions old, would be
        # trained on uncorrected (the doom family defaults to GAE, so this would happen silently there)
        how = "--with_vtrace=False (GAE)" if cfg.advantage_estimator == "auto" else \
            f"--advantage_estimator={cfg.advantage_estimator}"
        raise ConfigError(f"--replay_parameters={cfg.replay_parameters} replays old trajectories, which only V-trace "
                          f"corrects for; {how} does not: allowed: V-trace (--advantage_estimator=vtrace, or auto "
                          f"with --with_vtrace=True) with replay, or no replaying buffer (--replay_parameters=None, "
                          f"or queue only)")
    if cfg.replayed_loss == "impala" and not (replays and cfg.policy_loss == "ppo"):
        raise ConfigError(f"--replayed_loss=impala trains replayed samples with IMPALA's loss instead of PPO's: it needs "
                          f"--policy_loss=ppo (now {cfg.policy_loss}) and --replay_parameters with a standard or custom "
                          f"buffer (now {cfg.replay_parameters!r})")
    if (cfg.clear_policy_coeff or cfg.clear_value_coeff) and not replays:
        raise ConfigError(f"--clear_policy_coeff / --clear_value_coeff clone on replayed samples: set "
                          f"--replay_parameters with a standard or custom buffer (now: {cfg.replay_parameters!r})")


def replay_specs(cfg: Any) -> tuple:
    """``--replay_parameters`` parsed (``()`` without replay); ConfigError naming a bad entry."""
    if not cfg.replay_parameters:
        return ()
    from sfx.algo.replay_parameters import parse_replay_parameters  # only runs with replay on

    return tuple(parse_replay_parameters(cfg.replay_parameters))


def replay_needs_features(specs: tuple) -> bool:
    """A custom buffer samples or inserts by feature distance: the acting rule stores the core's outputs."""
    return any(s.needs_features for s in specs)
