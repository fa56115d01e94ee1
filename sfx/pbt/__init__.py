"""Population-based training: mutation and replacement (pure functions) and the population manager."""

from sfx.pbt.mutation import ParamSpec, batch_size_choices, mutate, perturb, select_replacement
from sfx.pbt.cluster import ClusterPopulationMember, read_members
from sfx.pbt.population import PopulationManager, hyperparameter_specs, max_batch_size

__all__ = ["ClusterPopulationMember", "read_members", "ParamSpec", "PopulationManager", "batch_size_choices", "hyperparameter_specs", "max_batch_size",
           "mutate", "perturb", "select_replacement"]
