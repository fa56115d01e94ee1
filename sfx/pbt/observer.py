"""Population-based training as a coordinator observer (registered when ``sfx.pbt`` is imported).

The coordinator calls it every loop turn; it drives a :class:`~sfx.pbt.population.PopulationManager`
(all policies in this run) or a :class:`~sfx.pbt.cluster.ClusterPopulationMember` (this run is one
member of a population spread over several runs, ``--pbt_population_dir``), which talk to the
learners and rollout workers through their control queues.
"""

from __future__ import annotations

import random
from typing import Any

from sfx.engine.observers import Observer, ObserverContext, register_observer
from sfx.engine.protocol import PBT_APPLIED, PBT_SNAPSHOT
from sfx.pbt.cluster import ClusterPopulationMember
from sfx.pbt.population import PopulationManager, max_batch_size


class PBTObserver(Observer):
    def __init__(self, manager: Any) -> None:
        self.manager = manager
        self.started = False

    def handle(self, reports: list) -> None:
        for kind, who, payload in reports:
            if kind == PBT_SNAPSHOT:
                self.manager.on_snapshot(who, payload)
            elif kind == PBT_APPLIED:
                self.manager.on_applied(who, payload)

    def update(self, policy_stats: list, env_steps: list[int]) -> None:
        if not self.started:
            self.manager.start(list(env_steps))
            self.started = True
        self.manager.update(policy_stats, list(env_steps))

    def write_summaries(self, policy: int, env_steps: int) -> None:
        self.manager.write_summaries(policy, env_steps)


def create_pbt_observer(cfg: Any, ctx: ObserverContext) -> PBTObserver | None:
    if not cfg.with_pbt:
        return None
    manager_class = ClusterPopulationMember if cfg.pbt_population_dir else PopulationManager
    return PBTObserver(manager_class(cfg, list(ctx.learner_control), list(ctx.rollout_control),
                                     ctx.env_info.reward_shaping, ctx.rng or random.Random(), ctx.summary))


register_observer("pbt", create_pbt_observer, largest_batch_size=max_batch_size)
