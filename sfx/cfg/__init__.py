"""Every command-line parameter, its default and help; cfg.json resume; validation with clear errors."""

from sfx.cfg.arguments import add_default_args, add_eval_args, int_like, str2bool
from sfx.errors import ConfigError
from sfx.cfg.parsing import build_parser, default_cfg, explicit_flags, parse_args
from sfx.cfg.validation import validate_cfg

__all__ = ["ConfigError", "add_default_args", "add_eval_args", "build_parser", "default_cfg", "explicit_flags",
           "int_like", "parse_args", "str2bool", "validate_cfg"]
