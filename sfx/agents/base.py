"""What an agent (a learning algorithm) declares to the engine: :class:`Agent`, its :class:`ActingRule`,
the per-step trajectory fields it needs stored (:class:`FieldSpec`), and the :class:`Batch` a sample
source hands to its training step.

The engine (processes, shared memory, queues, supervision, ranks, checkpoint timing, PBT messages)
knows an agent only through these declarations, so an algorithm is one folder plus
:func:`~sfx.agents.registry.register_agent`. Nothing here starts a process or touches a queue.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Mapping

import torch


def trajectories_per_batch(cfg: Any) -> int:
    """Whole trajectories of ``--rollout`` steps in a batch of ``--batch_size`` steps (at least one): how every agent
    counts a batch of trajectories (APPO's minibatch, R2D2's sequences, SAC's largest iteration)."""
    return max(1, cfg.batch_size // cfg.rollout)


def tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    """Apply ``fn`` to every leaf of nested dicts (e.g. a batch whose ``obs`` is a dict)."""
    if isinstance(tree, dict):
        return {k: tree_map(fn, v) for k, v in tree.items()}
    return fn(tree)


@dataclass(frozen=True)
class FieldSpec:
    """A per-step field of the trajectory slots: ``[slots, rollout, *shape]`` of ``dtype`` (zeros at start)."""

    shape: tuple[int, ...] = ()
    dtype: torch.dtype = torch.float32

    @property
    def bytes_per_step(self) -> int:
        n = 1
        for d in self.shape:
            n *= int(d)
        return n * torch.empty((), dtype=self.dtype).element_size()


@dataclass(frozen=True)
class Acted:
    """What an acting rule decided for ``n`` agents: ``actions [n, k]`` float32 as the slots store them
    (categorical choices counted from 0) and ``fields {name: [n, ...]}``, the rule's per-step fields."""

    actions: torch.Tensor
    fields: Mapping[str, torch.Tensor]


class ActingRule:
    """What a policy worker computes per request from the model's outputs, and what it stores.

    One rule serves the policy workers (``act``), the evaluator and ``sfx.enjoy``
    (``act(..., deterministic=...)``) and export (``mode_actions``, which must trace).

    Attributes:
        fields: the per-step trajectory fields ``act`` fills (besides ``actions``), name -> spec.
        truncation_field: a ``[slots, rollout]`` field that receives ``truncation_values`` of the final
            observation of a time-limit step, computed by the policy worker with the acting weights (APPO
            bootstraps from it); None: the policy worker skips those rows.
        export_outputs: the model outputs an exported graph gives besides ``actions`` and the state.
        stores_final_obs: the slots keep the final observation of a time-limit step
            (``final_obs {key: [slots, rollout, ...]}``, written by the rollout worker at that step), so a
            target computed later with other weights bootstraps from the real next state.
    """

    fields: Mapping[str, FieldSpec] = {}
    truncation_field: str | None = None
    stores_final_obs: bool = False
    # the model's ``forward_step`` outputs an exported graph gives besides the actions and the state (sfx.export)
    export_outputs: tuple[str, ...] = ("action_params", "values")

    def act(self, out: Mapping[str, torch.Tensor], deterministic: bool = False,
            actor_ids: torch.Tensor | None = None) -> Acted:
        """``out``: the model's ``forward_step`` outputs for ``n`` rows; ``actor_ids [n]`` (int64): which
        acting agent each row is (a rule may act differently per actor, e.g. an epsilon per actor)."""
        raise NotImplementedError

    def bind_actors(self, first: int, total: int, workers: int = 1) -> None:
        """Told once by each training policy worker before it acts: its ``actor_ids`` ``0 .. n - 1`` are actors
        ``first .. first + n - 1`` of the ``total`` acting agents of all ranks (a rule that acts differently
        per actor, e.g. R2D2's epsilon ladder, spreads over all of them), and ``workers`` acting processes of this
        rank serve its policy's requests, each about an equal share (the engine's placement: its policy workers,
        or one learner acting itself). Without it (evaluation, enjoy) a rule acts as for evaluation."""

    def mode_actions(self, out: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The deterministic actions ``[n, k]`` (export, ``--deterministic``); torch operations only."""
        raise NotImplementedError

    def truncation_values(self, out: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """``[n]``: what ``truncation_field`` stores for final observations (rows of ``out``)."""
        raise NotImplementedError


@dataclass
class Batch:
    """An iteration's samples, as a sample source hands them to :meth:`Agent.minibatches`.

    Attributes:
        data: the trajectories by field name (``obs`` a dict), ``[B, T(+1), ...]`` each, on the learner's device.
        valids: ``[B, T]`` bool, the samples that count (fresh: active and not past ``--max_policy_lag``).
        fresh: ``[B]`` bool, True for trajectories just sampled, False for replayed ones.
        age: ``[B, T]`` float, learner steps between the weights that acted and the current ones.
        env_steps: env steps (frames) the fresh samples stand for: the only ones counters count.
        ids: ``[B]`` int64, each trajectory's id in its source (for priority updates), -1 for fresh ones
            the source does not keep.
        stats: the source's own statistics (replay: each buffer's share, fill, sample ages), reported with
            the iteration's.
    """

    data: dict[str, Any]
    valids: torch.Tensor
    fresh: torch.Tensor
    age: torch.Tensor
    env_steps: int
    ids: torch.Tensor
    stats: dict[str, float] = field(default_factory=dict)

    @property
    def num_trajectories(self) -> int:
        return int(self.valids.shape[0])


@dataclass
class Stepped:
    """What a step returns when it measured new priorities for the samples it trained on: the learner shell
    hands ``priorities`` back through its sample source (``source.update_priorities(ids, priorities)``), so
    an agent never reaches into its store. A step with no priorities returns its ``stats`` dict alone.

    Attributes:
        stats: named statistics, as a plain step returns them.
        ids: ``[k]`` int64, the trained samples' ids in their source (a minibatch's ``ids``).
        priorities: ``[k]``, their new priorities.
    """

    stats: dict[str, float]
    ids: torch.Tensor
    priorities: torch.Tensor


class NonFiniteBatch(Exception):
    """A minibatch whose ``where`` (targets, loss or gradients) is not finite: the step applied nothing
    from it. The learner counts it and stops the run after ``--max_nan_batches`` in a row."""

    def __init__(self, where: str) -> None:
        super().__init__(f"{where} not finite")
        self.where = where


class Agent:
    """A learning algorithm. Class-level declarations (used before any learner exists: parsing, slot
    sizing, policy workers, PBT) and, per learner process, an instance holding the model and everything
    learned beside it (optimizers, target networks, running statistics).

    Subclass, set ``name``, override what differs, and :func:`~sfx.agents.registry.register_agent` it.
    The learner shell calls, per iteration: ``minibatches(batch)``, then ``step`` on each (publishing
    weights after each), then ``end_iteration(batch)``.
    """

    name: ClassVar[str] = ""
    # the title of its flag group in --help
    flag_group: ClassVar[str] = ""
    # the title of its model's flag group (add_model_flags) in --help
    model_flag_group: ClassVar[str] = "actor-critic model"
    # a module function "package.module:function" that runs instead of a training (argv -> exit code),
    # e.g. the dummy sampler; None: the engine trains with this agent
    entry_point: ClassVar[str | None] = None
    # None: trains on several ranks (torch.distributed) like APPO; else why not, refused at start in those words
    ranks_refused: ClassVar[str | None] = None
    # True: --batch_size counts the steps of whole trajectories (a multiple of --rollout); False: transitions
    # drawn one by one (SAC's minibatch of 256), any size
    batch_of_trajectories: ClassVar[bool] = True
    # True: the learner sets the pace (sampling waits on a replay ratio, the workers idle most of the time), so
    # on the CPU it gets every core by default (``--learner_main_loop_num_cores=0``); False: the cores the
    # rollout workers leave free (sfx.engine.wiring.learner_threads)
    learner_sets_the_pace: ClassVar[bool] = False
    # the trainer's shared flags this agent does not read -> what to do instead: given on the command line they
    # are refused (check_flags), never silently ignored
    ignored_flags: ClassVar[Mapping[str, str]] = {}
    # the --lr_schedule values it offers (sfx.algo.schedules), any other is refused: "linear_decay" needs apply_params
    # to set every optimizer's learning rate to its flag's value times ``self.lr_scale`` (the learner sets the
    # scale); a "kl_adaptive_*" schedule the agent runs itself
    lr_schedules: ClassVar[tuple[str, ...]] = ("constant",)

    # ---------------------------------------------------------------- declarations

    @classmethod
    def add_flags(cls, parser: argparse._ActionsContainer) -> None:
        """Add the agent's own flags (with defaults and help) to ``parser``'s group for it."""

    @classmethod
    def add_model_flags(cls, parser: argparse._ActionsContainer) -> None:
        """Add the flags of the model :meth:`make_model` builds, in a group of their own. By default the
        actor-critic's (:mod:`sfx.agents.kit.model_flags`); an agent with another model overrides this with its
        model's flags (none: the actor-critic's are then refused as another agent's)."""
        from sfx.agents.kit.model_flags import add_actor_critic_flags

        add_actor_critic_flags(parser)

    @classmethod
    def validate_model_flags(cls, cfg: Any) -> None:
        """Raise :class:`~sfx.errors.ConfigError` on a bad value of :meth:`add_model_flags`' flags."""
        from sfx.agents.kit.model_flags import validate_actor_critic_flags

        validate_actor_critic_flags(cfg)

    @classmethod
    def check_flags(cls, cfg: Any, explicit: Iterable[str]) -> None:
        """Raise :class:`~sfx.errors.ConfigError` (one line) when a flag given on the command line
        (``explicit``) is one this agent would ignore (:attr:`ignored_flags`). Runs before the shared checks,
        so the line names the flag, not a check of another flag it would have failed."""
        from sfx.errors import ConfigError

        for name in sorted(set(explicit) & set(cls.ignored_flags)):
            raise ConfigError(f"--{name}={getattr(cfg, name)} is not read by --algo={cls.name} (it would be ignored): "
                              f"{cls.ignored_flags[name]}; remove it")
        if cfg.lr_schedule not in cls.lr_schedules:
            raise ConfigError(f"--lr_schedule={cfg.lr_schedule} is not offered by --algo={cls.name}; its schedules: "
                              f"{', '.join(cls.lr_schedules)}")

    @classmethod
    def validate(cls, cfg: Any) -> None:
        """Raise :class:`~sfx.errors.ConfigError` on a bad value of the agent's flags."""

    @classmethod
    def trajectories_per_iteration(cls, cfg: Any) -> int:
        """Fresh trajectories that make one training iteration (slots are sized from it): by default one batch's
        (:func:`trajectories_per_batch`)."""
        return trajectories_per_batch(cfg)

    @classmethod
    def batches_ahead(cls, cfg: Any) -> int:
        """``--batches_ahead=-1`` (auto) resolved: how many learner batches the rollout workers may collect
        ahead of the learner (``sfx.engine.buffers.CollectionGate``); 0: only the trajectory slots bound it.
        An agent whose targets do not correct for policy lag keeps it small."""
        return 0

    @classmethod
    def make_model(cls, cfg: Any, obs_space: Any, action_space: Any, num_tasks: int = 1) -> torch.nn.Module:
        """The network the policy workers act with and the learner trains (an ``ActorCritic`` or a model
        with the same acting interface: ``forward_step``, ``initial_rnn_states``, ``rnn_state_size``,
        ``memory_len`` / ``memory_width``, ``reads_tasks`` (``forward_step`` wants each row's task),
        ``for_inference``)."""
        from sfx.models import create_actor_critic

        return create_actor_critic(cfg, obs_space, action_space, num_tasks)

    @classmethod
    def check_model(cls, cfg: Any, model: torch.nn.Module) -> None:
        """Raise :class:`~sfx.errors.ConfigError` when ``model`` (``make_model``'s, e.g. with a custom
        encoder or core) cannot serve this agent with these flags. The coordinator asks before anything
        starts (and before ``cfg.json`` is written), so a mismatch is one line, not a learner's crash."""

    @classmethod
    def check_checkpoint(cls, cfg: Any, model: torch.nn.Module, checkpoint: Mapping[str, Any], where: str) -> None:
        """Raise :class:`~sfx.errors.ConfigError` (one line naming ``where``, the checkpoint's folder) when a
        policy's newest checkpoint cannot resume with these flags. The coordinator asks before anything starts.
        By default: its weights must load into ``model`` (``make_model``'s; a model part states its own mismatch
        in the error, e.g. PopArt's number of tasks); an agent that keeps more in a checkpoint checks it too."""
        from sfx.errors import ConfigError

        try:
            model.load_state_dict(checkpoint["model"])
        except (RuntimeError, KeyError) as e:
            detail = " ".join(line.strip() for line in str(e).splitlines()[1:3]) or str(e)
            raise ConfigError(f"the checkpoint in {where} does not fit the model the current flags build "
                              f"({detail[:300]}); use the flags it was trained with or a new --experiment") from None

    @classmethod
    def acting_rule(cls, cfg: Any, action_space: Any) -> ActingRule:
        raise NotImplementedError(f"agent {cls.name} declares no acting rule")

    @classmethod
    def pbt_hyperparameters(cls, cfg: Any) -> dict[str, tuple[float, float]]:
        """The cfg fields population-based training may mutate -> (lowest, highest) value."""
        return {"learning_rate": (1e-6, 1e-2)}

    @classmethod
    def host_memory_bytes(cls, cfg: Any, trajectory_bytes: int) -> int:
        """Learner-process memory the agent will hold per policy beyond the model (replay buffers), given
        the bytes of one trajectory slot; checked at start against the machine's free memory."""
        return 0

    # ---------------------------------------------------------------- one learner's state

    def __init__(self, cfg: Any, model: torch.nn.Module, device: torch.device, group: Any = None) -> None:
        """``cfg``: the learner's own copy (PBT changes it in place); ``group``: a
        :class:`~sfx.engine.data_parallel.GradientGroup` when this policy learns on several ranks."""
        from sfx.agents.kit.optimizers import NamedOptimizers  # the kit imports this module

        self.cfg = cfg
        self.model = model
        self.device = device
        self.group = group
        self.lr_scale = 1.0  # --lr_schedule's factor on the learning-rate flags (set_lr_scale)
        # the agent's optimizers by checkpoint name and learning-rate flag: the defaults below checkpoint them
        # and set their rates
        self.optimizers = NamedOptimizers()

    def sample_source(self, fresh: Any) -> Any:
        """Where this agent's batches come from: ``fresh`` (the engine's
        :class:`~sfx.engine.sample_source.FreshTrajectories`), or a replay store built around it
        (``add`` / ``ready`` / ``next_batch`` / ``update_priorities``, see that module; the kit's base:
        :class:`sfx.agents.kit.replay_store.ReplayStore`)."""
        return fresh

    def minibatches(self, batch: Batch) -> Iterable[tuple[dict[str, Any], torch.Tensor]]:
        """The (minibatch, valids) pairs one iteration trains on, in order."""
        raise NotImplementedError

    def step(self, mb: dict[str, Any], valids: torch.Tensor) -> dict[str, float] | Stepped:
        """One optimizer step on a minibatch -> named statistics (``loss/<term>`` ...), or a :class:`Stepped`
        with the new priorities of the minibatch's samples (a prioritized replay: the learner gives them back
        to the sample source).

        Raises:
            NonFiniteBatch: nothing was applied.
        """
        raise NotImplementedError

    def end_iteration(self, batch: Batch) -> None:
        """After the iteration's last step, before its weights are published: by default the batch's valid
        observations join the model's input statistics (see :func:`update_obs_normalizer`)."""
        update_obs_normalizer(self.model, self.cfg, batch.data["obs"], batch.valids, self.group)

    def learning_state(self) -> dict[str, Any]:
        """Everything learned beside the model's weights (optimizer states, running statistics):
        checkpointed under these keys next to ``model``, copied by PBT, broadcast to ranks. By default the
        states of :attr:`optimizers` under their names."""
        return self.optimizers.state_dict()

    def load_learning_state(self, state: Mapping[str, Any]) -> None:
        """The inverse of :meth:`learning_state`; keys missing from an older checkpoint start afresh."""
        self.optimizers.load_state_dict(state)

    def apply_params(self, params: Mapping[str, Any]) -> None:
        """New hyperparameters (PBT, a resumed run's flags): ``cfg`` is already updated; apply what an
        optimizer holds itself. By default every optimizer of :attr:`optimizers` steps at its flag's value times
        ``self.lr_scale``."""
        self.optimizers.set_learning_rates(self.cfg, self.lr_scale)

    def set_lr_scale(self, scale: float) -> None:
        """``--lr_schedule``'s factor from the next step on: every learning rate becomes its flag's value times
        ``scale`` (the learner calls this before each iteration)."""
        self.lr_scale = float(scale)
        self.apply_params({})

    def current_lr(self) -> float:
        """The learning rate reported (TensorBoard's ``lr``): the first optimizer's, else ``--learning_rate``."""
        if self.optimizers:
            return self.optimizers.lr(next(iter(self.optimizers)))
        return float(self.cfg.learning_rate)


def update_obs_normalizer(model: torch.nn.Module, cfg: Any, obs: Mapping[str, torch.Tensor], valids: torch.Tensor,
                          group: Any = None) -> None:
    """Fold the valid steps' observations (``obs {key: [n, T + 1, ...]}``, ``valids [n, T]``) into the model's
    input statistics (with ``--normalize_input``).

    Called after an iteration's last optimizer step and before its weights are published: every sample is
    evaluated with the statistics it was acted with (samples of lag 0 recompute their behaviour log-probs
    exactly), and the policy workers get the new statistics together with the weights trained on them next.
    """
    if not (cfg.normalize_input and getattr(model, "has_obs_normalizer", False)) \
            or (group is None and not bool(valids.any())):
        return
    T = valids.shape[1]
    rows = {k: v[:, :T][valids] for k, v in obs.items()}
    # one non-finite observation would poison the running statistics for good (with ranks: on every
    # rank, and every rank takes part in the update or none does)
    bad = not all(bool(torch.isfinite(v).all()) for v in rows.values() if v.is_floating_point())
    if group is not None:
        if not group.any(bad):
            model.update_obs_normalizer(rows, reduce=group.sum)
    elif not bad:
        model.update_obs_normalizer(rows)
