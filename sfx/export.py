"""``python -m sfx.export --experiment=... --format=onnx``: the acting model of a trained policy as one file.

The experiment's ``cfg.json`` and newest checkpoint of ``--policy_index`` (``--load_checkpoint_kind=best``:
the best one) are loaded and the model a policy worker runs (preprocessing, encoder, core step with its
state as explicit inputs and outputs, action and value heads) is written to
``<experiment folder>/export/model_p{N}.onnx`` (``--format=torchscript``: ``model_p{N}.pt``, a traced
``torch.jit`` module) or to ``--output``, with ``model_p{N}.json`` beside it: the inputs and outputs (names,
shapes with a ``"batch"`` axis, dtypes), the initial state, the action space and how to step. The graph
itself is described in :mod:`sfx.models.export`.

``--env`` may be left out: the experiment's saved cfg names it. Any other flag overrides the saved cfg as
for ``sfx.enjoy``; only those that shape the model matter here.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any, Sequence

from sfx.cfg import ConfigError
from sfx.registries import parse_args
from sfx.cfg.parsing import ArgParser
from sfx.cfg.threads import acting_threads


def export_parser() -> argparse.ArgumentParser:
    """The flags of sfx.export on top of sfx.enjoy's."""
    parser = ArgParser(prog="python -m sfx.export", add_help=False, allow_abbrev=False)
    g = parser.add_argument_group("export")
    g.add_argument("--format", default="onnx", help="onnx, or torchscript (a traced torch.jit module); default: onnx")
    g.add_argument("--output", default=None,
                   help="the model file to write (its JSON goes beside it, same name, .json), or an existing "
                        "folder to write into; None = <experiment folder>/export/model_p{policy_index}.onnx (.pt)")
    return parser


def _split_argv(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """sfx.export's own flags, and the rest for the cfg parser (which takes ``--env`` from the saved cfg
    when it is not given, as for sfx.enjoy)."""
    own, rest = export_parser().parse_known_args(list(argv))
    return own, rest


def _load_checkpoint(cfg: Any, policy_id: int) -> tuple[dict, Path]:
    """The checkpoint ``cfg`` asks for, and its file."""
    from sfx.experiment import load_policy_checkpoint

    return load_policy_checkpoint(cfg, policy_id, what="export")


def export(cfg: Any, fmt: str = "onnx", output: str | None = None) -> dict:
    """Export the acting model of ``cfg``'s experiment (see the module docstring).

    ``cfg``: parsed with ``evaluation=True``. Returns ``{"model_path", "spec_path", "spec"}``.
    Raises :class:`~sfx.cfg.ConfigError` on an unknown format, a missing checkpoint, a missing exporter package.
    Torch runs on one thread meanwhile, as sfx.enjoy's (:func:`sfx.cfg.threads.acting_threads`).
    """

    with acting_threads():  # tracing runs the model; its batch of one gains nothing from many threads
        return _export(cfg, fmt, output)


def _export(cfg: Any, fmt: str, output: str | None) -> dict:
    from sfx.engine.wiring import probe_env
    from sfx.experiment import experiment_dir
    from sfx.agents import find_agent
    from sfx.models.export import EXPORT_FORMATS, FILE_SUFFIXES, export_model

    if fmt not in EXPORT_FORMATS:
        raise ConfigError(f"--format={fmt} is not known; allowed: {', '.join(EXPORT_FORMATS)}")
    policy_id = int(cfg.policy_index)
    checkpoint, checkpoint_path = _load_checkpoint(cfg, policy_id)
    name = f"model_p{policy_id}{FILE_SUFFIXES[fmt]}"
    path = experiment_dir(cfg) / "export" / name if output is None else Path(output).expanduser()
    if path.is_dir():
        path = path / name
    if path.suffix == ".json":
        raise ConfigError(f"--output={output} is the name of the spec file; allowed: the model file's name "
                          f"(its spec is written beside it with the suffix .json)")

    # float32 weights on the CPU: the graph is portable, whatever precision and device the training used
    model_cfg = copy.copy(cfg)
    model_cfg.device, model_cfg.mixed_precision = "cpu", "off"
    env_info = probe_env(model_cfg)
    agent = find_agent(cfg.algo)
    model = agent.make_model(model_cfg, env_info.observation_space, env_info.action_space, env_info.num_tasks)
    model.load_state_dict(checkpoint["model"])
    metadata = {
        "env": cfg.env,
        "experiment": str(experiment_dir(cfg)),
        "policy_index": policy_id,
        "checkpoint": str(checkpoint_path),
        "env_steps": checkpoint.get("env_steps"),
        "train_step": checkpoint.get("train_step"),
        "task_names": list(env_info.task_names),
    }
    spec = export_model(model, path, fmt, metadata, rule=agent.acting_rule(model_cfg, env_info.action_space))
    spec_path = path.with_suffix(".json")
    print(f"exported {checkpoint_path} to {path} ({fmt}); inputs, outputs and how to step: {spec_path}", flush=True)
    return {"model_path": str(path), "spec_path": str(spec_path), "spec": spec}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        export_parser().print_help()
        print()
    try:
        own, rest = _split_argv(argv)
        cfg = parse_args(rest, evaluation=True, prog="python -m sfx.export")
        export(cfg, own.format, own.output)
    except ConfigError as e:
        print(f"sfx: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
