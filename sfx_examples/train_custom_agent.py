"""A learning algorithm of your own, trained by sfx's engine: ``--algo=PG``, vanilla policy gradient with a learned
baseline (REINFORCE with a value baseline, Williams 1992; A2C's loss, Mnih et al. 2016), one optimizer step per batch.

Run::

    python -m sfx_examples.train_custom_agent                          # CartPole, a minute or two on 2 CPU cores
    python -m sfx_examples.train_custom_agent --env=gym_Acrobot-v1 --pg_entropy_coeff=0.001

An agent is one class (this file is the template: copy it into your package and change the step):

- its flags (``add_flags``) and their validation (``validate``);
- its acting rule: what a policy worker computes per request and stores per step (here the sampled action and its
  log-prob; it also asks for the final observation of a time-limit step, to bootstrap from with current weights);
- its training step on a minibatch (here one whole batch of trajectories): the model's forward pass, the loss terms,
  one sum of ``coefficient * term``, the kit's gradient step (non-finite vote, clipping, step);
- its optimizers, by name (the kit's :class:`~sfx.agents.kit.NamedOptimizers`): checkpoints, ``--lr_schedule`` and
  population-based training set their learning rates through them, with nothing more written here;
- the hyperparameters PBT may mutate.

The model is the default one, the actor-critic of :mod:`sfx.models` (encoder, core, policy and value heads), so every
model flag works. A flag this agent would ignore is refused without a list kept here: another agent's flag (``--
ppo_epochs``, ``--replay_ratio``) is not a flag of ``--algo=PG`` and the parser names whose it is; a model part this
step does not train (a PopArt head, the auxiliary heads) is refused in :meth:`PolicyGradient.check_model`.

``register_agent`` at the module's top level: worker processes import the module again and find the agent there.
"""

from __future__ import annotations

import sys
from typing import Any, Iterator, Mapping

import torch

import sfx.train
from sfx.agents import Acted, ActingRule, Agent, Batch, FieldSpec, register_agent
from sfx.agents.kit import gradient_step
from sfx.algo.distributions import make_action_distribution
from sfx.algo.gae import gae
from sfx.algo.targets import scale_rewards
from sfx.errors import ConfigError
from sfx_examples._cli import with_defaults

DEFAULT_ARGS = [
    "--algo=PG", "--env=gym_CartPole-v1", "--experiment=pg_example", "--train_dir=./train_dir", "--device=cpu",
    "--num_workers=2", "--num_envs_per_worker=8", "--rollout=32", "--batch_size=512", "--use_rnn=False",
    "--hidden_size=64", "--learning_rate=3e-3", "--train_for_env_steps=100000",
]


class SampleAndRemember(ActingRule):
    """Sample from the policy head; store the sample's log-prob; keep time-limit steps' final observations."""

    stores_final_obs = True

    def __init__(self, action_space: Any) -> None:
        self.action_space = action_space
        self.fields = {"behaviour_log_prob": FieldSpec(())}

    def act(self, out: Mapping[str, torch.Tensor], deterministic: bool = False,
            actor_ids: torch.Tensor | None = None) -> Acted:
        dist = make_action_distribution(self.action_space, out["action_params"])
        actions = dist.mode() if deterministic else dist.sample()
        n = actions.shape[0]
        return Acted(actions.float().reshape(n, -1), {"behaviour_log_prob": dist.log_prob(actions)})

    def mode_actions(self, out: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return make_action_distribution(self.action_space, out["action_params"]).mode()


class PolicyGradient(Agent):
    """Vanilla policy gradient with a value baseline (see the module docstring)."""

    name = "PG"
    flag_group = "policy gradient (--algo=PG, sfx_examples.train_custom_agent)"
    # the named optimizers' rates follow --lr_schedule=linear_decay (the base class's apply_params)
    lr_schedules = ("constant", "linear_decay")

    @classmethod
    def add_flags(cls, parser: Any) -> None:
        parser.add_argument("--pg_entropy_coeff", type=float, default=0.01,
                            help="entropy bonus coefficient, >= 0; 0.01 keeps a discrete policy exploring early")
        parser.add_argument("--pg_value_coeff", type=float, default=0.5,
                            help="baseline (value) loss coefficient, >= 0; A2C's 0.5")

    @classmethod
    def validate(cls, cfg: Any) -> None:
        for name in ("pg_entropy_coeff", "pg_value_coeff"):
            if not getattr(cfg, name) >= 0:
                raise ConfigError(f"--{name}={getattr(cfg, name)} must be >= 0")

    @classmethod
    def check_model(cls, cfg: Any, model: torch.nn.Module) -> None:
        """This step trains the policy and value heads; a model part it would leave untrained is refused."""
        if model.popart is not None:
            raise ConfigError(f"--popart={cfg.popart} gives the model a PopArt value head, whose statistics "
                              f"--algo={cls.name} does not update; allowed: --popart=False")
        if model.aux is not None:
            raise ConfigError(f"the model has auxiliary heads (--aux_loss_reconstruction_coeff="
                              f"{cfg.aux_loss_reconstruction_coeff}, --aux_loss_future_pred_coeff="
                              f"{cfg.aux_loss_future_pred_coeff}), whose losses --algo={cls.name} does not add; "
                              f"allowed: both 0")

    @classmethod
    def acting_rule(cls, cfg: Any, action_space: Any) -> ActingRule:
        return SampleAndRemember(action_space)

    @classmethod
    def pbt_hyperparameters(cls, cfg: Any) -> dict[str, tuple[float, float]]:
        return {"learning_rate": (1e-5, 1e-2), "pg_entropy_coeff": (1e-4, 0.1)}

    def __init__(self, cfg: Any, model: torch.nn.Module, device: torch.device, group: Any = None) -> None:
        super().__init__(cfg, model, device, group)
        self.check_model(cfg, model)
        self.optimizer = self.optimizers.adam("pg_optimizer", model.parameters(), "learning_rate", cfg,
                                              eps=cfg.adam_eps)
        self.final_values_seen = 0  # time-limit steps bootstrapped from their stored final observation

    def minibatches(self, batch: Batch) -> Iterator[tuple[dict[str, Any], torch.Tensor]]:
        yield batch.data, batch.valids

    def step(self, mb: dict[str, Any], valids: torch.Tensor) -> dict[str, float]:
        model, cfg = self.model, self.cfg
        n, T = mb["rewards"].shape
        done = mb["terminated"] | mb["truncated"]
        out = model.forward_trajectories(mb["obs"], mb["rnn_states"], done, cfg.recurrence if cfg.use_rnn else T)
        dist = make_action_distribution(model.action_space, out.action_params.reshape(n * T, -1))
        log_prob = dist.log_prob(mb["actions"].reshape(n * T, -1)).reshape(n, T)
        rewards = scale_rewards(mb["rewards"], cfg.reward_scale, cfg.reward_clip)
        trunc = mb["truncated"] & ~mb["terminated"]
        if bool(trunc.any()):
            # a time-limit step: its return goes on from the real next state, valued with today's weights
            final = {k: v[trunc] for k, v in mb["final_obs"].items()}
            with torch.no_grad():
                states = model.initial_rnn_states(int(trunc.sum()), self.device)
                rewards[trunc] += cfg.gamma * model.forward_step(final, states)["values"]
            self.final_values_seen += int(trunc.sum())
        discounts = cfg.gamma * (~done).float()
        targets = gae(rewards.T, out.values.detach().T, out.bootstrap_values, discounts.T, 1.0)
        returns, adv = targets.returns.T, targets.advantages.T
        weight = valids.float() / valids.float().sum().clamp(min=1.0)
        if model.returns_normalizer is not None:
            model.returns_normalizer.update(returns[valids])
        terms = {"policy": -(log_prob * adv * weight).sum(),
                 "value": ((out.values_normalized - model.normalize_values(returns)) ** 2 * weight).sum(),
                 "entropy": (dist.entropy().reshape(n, T) * weight).sum()}
        coefficients = {"policy": 1.0, "value": cfg.pg_value_coeff, "entropy": -cfg.pg_entropy_coeff}
        loss = sum(coefficients[name] * term for name, term in terms.items())
        grad_norm = gradient_step(loss, self.optimizer, model.parameters(), max_grad_norm=cfg.max_grad_norm)
        return {"loss/total": loss.item(), **{f"loss/{k}": v.item() for k, v in terms.items() if k != "entropy"},
                "entropy": terms["entropy"].item(), "grad_norm": grad_norm.item(),
                "final_values_seen": float(self.final_values_seen)}


register_agent(PolicyGradient)


def main(argv: list[str] | None = None) -> int:
    """Train; ``argv`` (default ``sys.argv[1:]``) adds or replaces sfx.train flags."""
    return sfx.train.main(with_defaults(DEFAULT_ARGS, argv))


if __name__ == "__main__":
    sys.exit(main())
