"""Every command-line parameter, its default and help; cfg.json resume; validation with clear errors.

The parser takes the agents and env families to choose from as a :class:`~sfx.cfg.parsing.Catalog`;
:mod:`sfx.registries` hands it the registered ones (``from sfx.registries import default_cfg, parse_args``).
"""

from sfx.cfg.arguments import add_default_args, add_eval_args
from sfx.cfg.flag_types import int_like, str2bool
from sfx.cfg.parsing import Catalog, explicit_flags
from sfx.cfg.validation import validate_cfg
from sfx.errors import ConfigError

__all__ = ["Catalog", "ConfigError", "add_default_args", "add_eval_args", "explicit_flags", "int_like", "str2bool",
           "validate_cfg"]
