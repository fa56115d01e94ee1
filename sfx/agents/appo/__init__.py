"""APPO, sfx's default agent: :class:`~sfx.agents.appo.agent.APPO` (declarations), its flags and typed config
(:mod:`~sfx.agents.appo.flags`), its acting rule (:mod:`~sfx.agents.appo.acting`) and its learning step
(:mod:`~sfx.agents.appo.learning`)."""

from sfx.agents.appo.acting import APPOActingRule
from sfx.agents.appo.agent import APPO
from sfx.agents.appo.flags import (MINIBATCH_UNITS, APPOConfig, advantage_estimator, minibatch_unit, replay_specs,
                                   running_advantage_normalization)
from sfx.agents.appo.learning import iteration_targets, learning_step, make_optimizer

__all__ = ["APPO", "APPOActingRule", "APPOConfig", "MINIBATCH_UNITS", "advantage_estimator", "iteration_targets",
           "learning_step", "make_optimizer", "minibatch_unit", "replay_specs", "running_advantage_normalization"]
