"""Population-based training: mutation and replacement (pure functions) and the population manager,
which plugs into the coordinator as an observer (importing this package registers it)."""

from sfx.pbt.mutation import ParamSpec, batch_size_choices, mutate, perturb, select_replacement
from sfx.pbt.cluster import ClusterPopulationMember, read_members
from sfx.pbt.population import PopulationManager, hyperparameter_specs, max_batch_size
from sfx.pbt.observer import PBTObserver  # registers the observer

__all__ = ["ClusterPopulationMember", "read_members", "ParamSpec", "PBTObserver", "PopulationManager", "batch_size_choices", "hyperparameter_specs", "max_batch_size",
           "mutate", "perturb", "select_replacement"]
