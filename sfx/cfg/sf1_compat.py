"""Sample Factory 1.x flags that sfx accepts so that SF1's published command lines run as written.

Two groups show in ``--help``:

* **Flags with no effect here** (:data:`NO_EFFECT_GROUP`): SF1 flags whose usual value describes
  what sfx always does. Each is accepted at those values only; any other value is a one-line error
  that says what to use instead, never a silently ignored setting.
* **SF1 names of sfx flags** (:data:`ALIAS_GROUP`): setting one sets the sfx flag it names (the same
  cfg field), translating the value where SF1 spelled it differently. Most belong to one env family
  (``dmlab_``): they are accepted for every env but refuse to act when ``--env`` is of another
  family, because the field they set exists only there.

SF1 flags that would change what sfx does but have no implementation yet are NOT accepted: an
unknown flag stays an error. docs/migrating.md ("Sample Factory 1.x command lines") lists them.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from typing import Any

from sfx.cfg.flag_types import AcceptOnly, str2bool
from sfx.cfg.sf2_compat import add_sf2_compat_args

NO_EFFECT_GROUP = "Sample Factory 1.x flags with no effect here"
ALIAS_GROUP = "Sample Factory 1.x names of sfx flags"

# SF1's --dmlab_level_cache_path default (a folder in the working directory, read at parse time)
SF1_DMLAB_CACHE_DIR = ".dmlab_cache"
# an empty --dmlab_level_cache_dir means "no cache" to the dmlab_ family (it tests truthiness), and
# unlike None it records that --dmlab_use_level_cache=False switched the cache off (see below)
CACHE_OFF = ""


Translate = Callable[[Any, Any], Any]


class Sf1Alias(argparse.Action):
    """An SF1 flag name that sets the cfg field ``target`` of an sfx flag.

    ``translate(value, current)`` turns the SF1 value into the sfx one (``current`` is the field's
    value so far); without it the value is stored as is. The alias has no field of its own (its
    default is suppressed), so cfg, cfg.json and ``cfg.explicit_args`` carry only the sfx name.

    The target flag may be added to the parser after the alias (an env family's flag), which is why
    the alias looks it up when it is used instead of sharing its ``dest`` when it is defined: a
    shared ``dest`` would create the family's field for every other family too.
    """

    def __init__(self, option_strings: Sequence[str], dest: str, target: str = "", family: str = "",
                 translate: Translate | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("default", argparse.SUPPRESS)
        super().__init__(option_strings, dest, **kwargs)
        self.target = target
        self.family = family
        self.translate = translate

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if not any(a.dest == self.target and a is not self for a in parser._actions):
            where = f", a flag of {self.family} envs only" if self.family else ""
            env = getattr(namespace, "env", None)
            this_env = f"--env={env}" if env else "this --env"
            raise argparse.ArgumentError(self, f"is Sample Factory 1.x's name of --{self.target}{where}; "
                                               f"{this_env} has no such flag")
        value = self.translate(values, getattr(namespace, self.target, None)) if self.translate else values
        setattr(namespace, self.target, value)


class EncoderCustom(argparse.Action):
    """SF1's ``--encoder_custom``: a registered encoder that replaced the one of ``--encoder_type``.

    ``vizdoom`` (SF1's doom default) is sfx's conv encoder, which already reads doom measurements
    when ``--doom_measurements`` puts them in the observation: nothing to set. ``dmlab_instructions``
    is SF1's DMLab encoder that also reads the level's instruction: ``--dmlab_use_instructions=True``.
    Any other name sets ``--encoder_type`` (sfx's registry of custom encoders checks it).
    """

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("default", argparse.SUPPRESS)
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if values == "vizdoom":
            return
        if values == "dmlab_instructions":
            if not any(a.dest == "dmlab_use_instructions" for a in parser._actions):
                raise argparse.ArgumentError(self, "'dmlab_instructions' reads DeepMind Lab instructions: "
                                                   "only for dmlab_ envs")
            namespace.dmlab_use_instructions = True
            return
        namespace.encoder_type = values


def _one_task_per_worker(value: bool, current: Any) -> str:
    # SF1 True: worker i plays task i % 30 with all its envs; False: a worker's envs play different tasks
    return "worker" if value else "env"


def _cache_path(value: str, current: Any) -> str:
    # --dmlab_use_level_cache=False wins whatever the order of the two flags, as it did in SF1
    return CACHE_OFF if current == CACHE_OFF else value


def _use_cache(value: bool, current: Any) -> str:
    if not value:
        return CACHE_OFF
    return current or os.path.join(os.getcwd(), SF1_DMLAB_CACHE_DIR)


def add_sf1_compat_args(parser: argparse.ArgumentParser) -> None:
    """Add the Sample Factory 1.x flags sfx accepts (see the module docstring) to ``parser``."""
    g = parser.add_argument_group(
        NO_EFFECT_GROUP,
        "accepted so that Sample Factory 1.x command lines run as written, at the values that match what sfx "
        "does; another value is an error that says what to use instead")
    g.add_argument("--benchmark", type=str2bool, nargs="?", const=True, default=False, metavar="BOOL",
                   action=AcceptOnly, allowed=(False,),
                   why="SF1's benchmark mode stopped a run after 2M env frames or 1M samples; here use "
                       "--train_for_env_steps=2000000, or python -m sfx.dummy_sampler for sampling throughput",
                   help="SF1's benchmark mode; False (SF1's default, a normal run) is the only value")
    g.add_argument("--encoder_extra_fc_layers", type=int, default=1, metavar="N", action=AcceptOnly, allowed=(1,),
                   why="sfx's conv and resnet encoders end in exactly one fully connected layer of --hidden_size "
                       "(SF1's default); other counts are not implemented",
                   help="fully connected layers after the image encoder; sfx always has 1 (SF1's default)")
    g.add_argument("--num_minibatches_to_accumulate", type=int, default=-1, metavar="N",
                   help="SF1: minibatches the learner may hold before sampling pauses (0 = sampling pauses while "
                        "it trains). Any value is accepted and changes nothing: sfx bounds how far sampling runs "
                        "ahead of the learner in whole batches (--batches_ahead) and with its trajectory slots "
                        "(--traj_buffers_excess_ratio), and drops samples older than --max_policy_lag")

    g = parser.add_argument_group(
        ALIAS_GROUP,
        "Sample Factory 1.x spellings: each sets the sfx flag it names (translating the value where needed); "
        "cfg.json records the sfx name")
    g.add_argument("--encoder_custom", metavar="NAME", action=EncoderCustom,
                   help="SF1: a registered encoder replacing --encoder_type's. vizdoom (SF1's doom default) = sfx's "
                        "conv encoder (nothing to set); dmlab_instructions = --dmlab_use_instructions=True; any "
                        "other name sets --encoder_type (default: not given, --encoder_type decides)")
    g.add_argument("--dmlab_one_task_per_worker", type=str2bool, nargs="?", const=True, metavar="BOOL",
                   action=Sf1Alias, target="dmlab30_level_assignment", family="dmlab_",
                   translate=_one_task_per_worker,
                   help="dmlab_ envs; SF1's flag (SF1 default False) for --dmlab30_level_assignment: True = worker, "
                        "False = env (default: not given, --dmlab30_level_assignment decides)")
    g.add_argument("--dmlab30_dataset", metavar="PATH", action=Sf1Alias, target="dmlab_dataset_path",
                   family="dmlab_",
                   help="dmlab_ envs; SF1's flag (SF1 default ~/datasets/brady_konkle_oliva2008) for "
                        "--dmlab_dataset_path (default: not given, --dmlab_dataset_path decides)")
    g.add_argument("--dmlab_level_cache_path", metavar="PATH", action=Sf1Alias, target="dmlab_level_cache_dir",
                   family="dmlab_", translate=_cache_path,
                   help="dmlab_ envs; SF1's flag (SF1 default ./.dmlab_cache) for --dmlab_level_cache_dir "
                        "(default: not given, --dmlab_level_cache_dir decides)")
    g.add_argument("--dmlab_use_level_cache", type=str2bool, nargs="?", const=True, metavar="BOOL",
                   action=Sf1Alias, target="dmlab_level_cache_dir", family="dmlab_", translate=_use_cache,
                   help="dmlab_ envs; SF1's flag (SF1 default True): False = no level cache, whatever "
                        "--dmlab_level_cache_path says; True without a cache folder = SF1's ./.dmlab_cache "
                        "(default: not given, --dmlab_level_cache_dir decides)")
    add_sf2_compat_args(parser)  # Sample Factory 2's spellings, in their own --help group
