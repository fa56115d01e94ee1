"""The acting model as one graph of plain tensors, written to ONNX or TorchScript (``python -m sfx.export``).

What a policy worker runs for one step (:meth:`ActorCritic.forward_step`: preprocessing, encoder, core,
heads) becomes a function of positional tensors, with the core's state passed in and given back
explicitly, so a runtime without sfx (onnxruntime, a C++ TorchScript host) can act step by step.
Every axis 0 is the batch (any size, one row per agent).

Inputs, in this order:

* each observation key as the buffers store it (``obs_spec``: ``"obs"`` for a Box space, a Dict
  space's keys sorted, ``"action_mask"`` included) in its own dtype: uint8 frames stay uint8, the
  model's scaling and input normalization are inside the graph;
* with ``--use_prev_action_reward``: ``_prev_action [B, k]`` float32 (the previous action as sfx stores
  it: categorical choices + 1, the Box action itself; zeros at an episode start) and ``_prev_reward [B, 1]``
  float32 (raw; zero at an episode start);
* ``rnn_states [B, S]`` float32, ``S >= 1`` (one dummy column without a recurrent core);
* a core with a memory (Transformer-XL): ``memory [B, R, W]`` float32;
* with PopArt over several tasks: ``tasks [B]`` int64 (which task's value).

Outputs, in this order:

* ``actions [B, k]``: the deterministic action, as sfx stores actions: the most likely choice of each
  categorical head (int64, an index in ``[0, n)``: the space's ``start`` is not added), the Gaussian's
  mean for Box actions (float32, not clipped to the bounds); this is ``sfx.enjoy --deterministic``'s action;
* ``action_params [B, P]`` float32: the distribution's parameters, to sample from (logits of each
  categorical head concatenated, masked choices at ``MASKED_LOGIT``; ``[mean, log_std]`` for Box actions,
  ``log_std`` unclamped: sfx clamps it to ``[LOG_STD_MIN, LOG_STD_MAX]`` when sampling);
* ``values [B]`` float32, in the env's reward scale (these two are APPO's: an agent's acting rule names what
  its graph gives here, ``ActingRule.export_outputs``; R2D2: ``q_values [B, A]``, rescaled Q-values);
* ``new_rnn_states [B, S]``: feed back as the next step's ``rnn_states``;
* a memory core: ``memory_entry [B, W]`` and ``memory_index [B]`` int64: the caller writes row ``b``'s entry
  at ``memory[b, memory_index[b]]`` before the next step.

At an episode start a row's ``rnn_states`` is ``initial_rnn_states`` (the memory needs no reset: the
state row says which of its entries belong to the episode). :func:`export_spec` writes all of this,
with the shapes, into the JSON beside the model file.

The graph computes in float32 on the CPU whatever ``--mixed_precision`` and ``--device`` the training
used (the checkpoint's weights are float32; a bf16 encoder's actions may differ from the export's in the
last bits). Both formats are traced from a batch of zeros: a registered custom encoder or core is
exported like the built-ins as long as its Python control flow does not depend on tensor values (such
a branch is frozen as the zeros took it).
"""

from __future__ import annotations

import copy
import json
import math
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from sfx.algo.distributions import LOG_STD_MAX, LOG_STD_MIN, action_shape, categorical_sizes
from sfx.errors import ConfigError
from sfx.models.obs import PREV_ACTION_KEY, PREV_REWARD_KEY, obs_spec

EXPORT_FORMATS = ("onnx", "torchscript")
FILE_SUFFIXES = {"onnx": ".onnx", "torchscript": ".pt"}
ONNX_OPSET = 17
BATCH = "batch"  # the name of the dynamic axis 0
SPEC_VERSION = 1

STATE_INPUTS = ("rnn_states", "memory", "tasks")
OUTPUT_NAMES = ("actions", "action_params", "values", "new_rnn_states", "memory_entry", "memory_index")
# what the graph gives besides the actions and the state: the rule's ``export_outputs`` (APPO: the distribution's
# parameters and the value; R2D2: the Q-values)
DEFAULT_EXPORT_OUTPUTS = ("action_params", "values")


class ActingModel(nn.Module):
    """``ActorCritic.forward_step`` over positional tensors (see the module docstring for the order),
    returning a tuple: what ``torch.onnx.export`` and ``torch.jit.trace`` take.

    Attributes:
        input_names, output_names: the graph's names, in order.
    """

    def __init__(self, model: nn.Module, rule: Any = None) -> None:
        """``rule``: the agent's acting rule; its ``mode_actions`` gives the ``actions`` output (only
        ``forward`` needs it)."""
        super().__init__()
        self.model = model
        self.rule = rule
        self.obs_keys = list(obs_spec(model.obs_space))
        if model.prev_action_reward:
            self.obs_keys += [PREV_ACTION_KEY, PREV_REWARD_KEY]
        self.has_memory = bool(model.memory_len)
        # PopArt's several value outputs need each row's task; otherwise the model reads no task
        self.has_tasks = model.reads_tasks and model.num_tasks > 1
        self.input_names = self.obs_keys + ["rnn_states"] + (["memory"] if self.has_memory else []) + (
            ["tasks"] if self.has_tasks else [])
        self.model_outputs = tuple(getattr(rule, "export_outputs", DEFAULT_EXPORT_OUTPUTS))
        self.output_names = ["actions", *self.model_outputs, "new_rnn_states"] + (
            ["memory_entry", "memory_index"] if self.has_memory else [])
        clash = sorted(set(self.obs_keys) & (set(STATE_INPUTS) | set(OUTPUT_NAMES) | set(self.model_outputs)))
        if clash:
            raise ConfigError(f"observation keys {clash} clash with the exported graph's own input and output "
                              f"names; allowed: keys other than {', '.join(STATE_INPUTS + OUTPUT_NAMES)}")

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n = len(self.obs_keys)
        obs = dict(zip(self.obs_keys, inputs[:n]))
        rnn_states = inputs[n]
        memory = inputs[n + 1] if self.has_memory else None
        tasks = inputs[-1] if self.has_tasks else None
        out = self.model.forward_step(obs, rnn_states, tasks, memory)
        actions = self.rule.mode_actions(out)  # the same deterministic actions sfx.enjoy --deterministic takes
        result = (actions, *(out[name] for name in self.model_outputs), out["new_rnn_states"])
        if self.has_memory:
            result += (out["memory_entry"], out["memory_index"])
        return result


def example_inputs(model: nn.Module, batch_size: int = 2) -> tuple[torch.Tensor, ...]:
    """Inputs of the exported graph for ``batch_size`` agents at an episode start (observations of
    zeros), in :class:`ActingModel`'s order."""
    acting = ActingModel(model)
    spec = obs_spec(model.obs_space)
    inputs = []
    for key in acting.obs_keys:
        if key == PREV_ACTION_KEY:
            inputs.append(torch.zeros(batch_size, action_shape(model.action_space)))
        elif key == PREV_REWARD_KEY:
            inputs.append(torch.zeros(batch_size, 1))
        else:
            shape, dtype = spec[key]
            inputs.append(torch.from_numpy(np.zeros((batch_size, *shape), dtype=dtype)))
    inputs.append(model.initial_rnn_states(batch_size))
    if acting.has_memory:
        inputs.append(torch.zeros(batch_size, model.memory_len, model.memory_width))
    if acting.has_tasks:
        inputs.append(torch.zeros(batch_size, dtype=torch.long))
    return tuple(inputs)


def _tensor_spec(name: str, x: torch.Tensor) -> dict:
    return {"name": name, "shape": [BATCH, *x.shape[1:]], "dtype": str(x.dtype).removeprefix("torch.")}


def _finite_or_none(values: np.ndarray) -> list:
    return [float(v) if math.isfinite(v) else None for v in np.asarray(values, dtype=np.float64).reshape(-1)]


def action_space_spec(space: gym.Space) -> dict:
    """The action space in JSON, with what turns an ``actions`` row into the env's action."""
    if isinstance(space, gym.spaces.Box):
        return {"type": "Box", "shape": list(space.shape), "dtype": str(space.dtype),
                "low": _finite_or_none(space.low), "high": _finite_or_none(space.high),
                "to_env": "reshape the row to shape and clip it to [low, high] (null: unbounded)"}
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start),
                "to_env": "actions[b, 0] + start"}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": [int(n) for n in space.nvec],
                "start": [int(s) for s in space.start], "to_env": "actions[b] + start"}
    heads = [{"n": int(s.n), "start": int(s.start)} for s in space.spaces]
    return {"type": "Tuple", "spaces": heads, "to_env": "a tuple: actions[b, i] + spaces[i].start"}


def export_spec(model: nn.Module, fmt: str, file_name: str, batch_size: int = 2, rule: Any = None) -> dict:
    """The JSON written beside an exported model: its inputs and outputs (names, shapes with ``"batch"``,
    dtypes), the initial state, the action space and how to step (``rule``: the agent's acting rule)."""
    acting = ActingModel(model, rule)
    inputs = example_inputs(model, batch_size)
    with torch.no_grad():
        outputs = acting(*inputs)
    sizes = categorical_sizes(model.action_space)
    step = [
        "feed every input; rows are agents, any number of them",
        "actions: the deterministic action (see action_space.to_env)"
        + ("; to sample instead, use action_params" if "action_params" in acting.model_outputs else ""),
        "feed new_rnn_states back as the next step's rnn_states",
        "at an episode start, set that row of rnn_states to initial_rnn_states",
    ]
    if acting.has_memory:
        step.append("write memory[b, memory_index[b], :] = memory_entry[b] before the next step (memory starts as "
                    "zeros and is never reset: rnn_states says which rows belong to the episode)")
    if model.prev_action_reward:
        step.append(f"feed {PREV_ACTION_KEY} = this step's action row ("
                    + ("actions + 1" if sizes is not None else "actions")
                    + f") and {PREV_REWARD_KEY} = the reward it got; both zeros at an episode start")
    if acting.has_tasks:
        step.append("tasks: each row's task id (which PopArt value output)")
    return {
        "spec_version": SPEC_VERSION,
        "format": fmt,
        "file": file_name,
        **({"opset": ONNX_OPSET} if fmt == "onnx" else {}),
        "inputs": [_tensor_spec(n, x) for n, x in zip(acting.input_names, inputs)],
        "outputs": [_tensor_spec(n, x) for n, x in zip(acting.output_names, outputs)],
        "initial_rnn_states": model.initial_rnn_states(1)[0].tolist(),
        "memory": ({"rows": int(model.memory_len), "width": int(model.memory_width), "initial": "zeros"}
                   if acting.has_memory else None),
        "action_space": action_space_spec(model.action_space),
        **({} if "action_params" not in acting.model_outputs else {"action_params": (
                          {"layout": "logits", "sizes": sizes,
                           "sample": "each head: a choice from softmax of its sizes[i] logits, in order"}
                          if sizes is not None else
                          {"layout": "mean_log_std", "log_std_clamp": [LOG_STD_MIN, LOG_STD_MAX],
                           "sample": "mean + exp(clamp(log_std, *log_std_clamp)) * normal(0, 1), per column"})}),
        "num_tasks": int(model.num_tasks),
        "step": step,
    }


def export_model(model: nn.Module, path: str | Path, fmt: str = "onnx", metadata: dict | None = None,
                 batch_size: int = 2, rule: Any = None) -> dict:
    """Write ``model`` (an ``ActorCritic``, float32 on the CPU, eval mode) to ``path`` in ``fmt``
    (``onnx`` | ``torchscript``) and its spec to ``path`` with the suffix ``.json``.

    ``rule``: the agent's acting rule (``sfx.agents.ActingRule``), whose ``mode_actions`` gives the graph's
    ``actions``. ``metadata``: extra JSON fields (the experiment, the checkpoint). Returns the spec.
    """
    if rule is None:
        raise ValueError("export_model needs the agent's acting rule (rule=find_agent(cfg.algo).acting_rule(...))")
    if fmt not in EXPORT_FORMATS:
        raise ConfigError(f"--format={fmt} is not known; allowed: {', '.join(EXPORT_FORMATS)}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a copy without gradients: traced outputs would otherwise require grad, and the caller's model keeps its mode
    model = copy.deepcopy(model).cpu().eval().requires_grad_(False)
    acting = ActingModel(model, rule).eval()
    inputs = example_inputs(model, batch_size)
    if fmt == "onnx":
        _export_onnx(acting, inputs, path)
    else:
        with torch.no_grad(), warnings.catch_warnings():
            _quiet_tracing()
            traced = torch.jit.trace(acting, inputs, check_trace=False)
        traced.save(str(path))
    spec = {**export_spec(model, fmt, path.name, batch_size, rule), **(metadata or {})}
    json_path = path.with_suffix(".json")
    json_path.write_text(_to_json(spec) + "\n")
    return spec


def _to_json(value: Any, indent: str = "") -> str:
    """Indented JSON with every list of numbers on one line (an LSTM's initial state is thousands of them)."""
    inner = indent + "  "
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(k)}: {_to_json(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return "[\n" + ",\n".join(inner + _to_json(v, inner) for v in value) + f"\n{indent}]"
    return json.dumps(value, allow_nan=False)


def _export_onnx(acting: ActingModel, inputs: tuple, path: Path) -> None:
    try:
        import onnx  # noqa: F401 - torch.onnx writes the file with it
    except ImportError as e:
        raise ConfigError(f"--format=onnx needs the onnx package ({e}): pip install onnx, or pip install "
                          f"sfx[export]") from e
    dynamic_axes = {name: {0: BATCH} for name in acting.input_names + acting.output_names}
    torch.onnx.register_custom_op_symbolic("aten::movedim", _movedim_symbolic, ONNX_OPSET)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            _quiet_tracing()
            # the TorchScript-based exporter: torch.onnx's default since torch 2.9 (dynamo=True: torch.export and
            # onnxscript) exported these models as well (checked: GRU, conv + GRU, Transformer-XL against
            # onnxruntime) but took 5-20 s per model where this takes under one, and needs onnxscript
            torch.onnx.export(acting, inputs, str(path), input_names=acting.input_names,
                              output_names=acting.output_names, dynamic_axes=dynamic_axes, opset_version=ONNX_OPSET,
                              dynamo=False)
    finally:
        torch.onnx.unregister_custom_op_symbolic("aten::movedim", ONNX_OPSET)


def _movedim_symbolic(g: Any, x: Any, source: Any, destination: Any) -> Any:
    """``aten::movedim`` as an ONNX Transpose, negative dims included: the exporter's own symbolic uses a
    negative dim as a list index and writes an invalid ``perm`` (the model moves HWC frames to the CHW
    layout of their statistics with ``movedim(-1, -3)``)."""
    rank = x.type().dim()
    src, dst = ([int(d) % rank for d in _constant_ints(v)] for v in (source, destination))
    rest = iter(d for d in range(rank) if d not in src)
    by_dst = dict(zip(dst, src))
    perm = [by_dst[d] if d in by_dst else next(rest) for d in range(rank)]
    return g.op("Transpose", x, perm_i=perm)


def _constant_ints(value: Any) -> list[int]:
    node = value.node()
    const = getattr(node, node.kindOf("value"))("value")  # a tensor ("t"), an int ("i") or ints ("is")
    return [int(v) for v in (const.reshape(-1).tolist() if isinstance(const, torch.Tensor) else np.ravel(const))]


def _quiet_tracing() -> None:
    """Silence what tracing says about this graph and is not a problem for it (inside ``catch_warnings``)."""
    # shape checks (the memory's, the value head's width) become constants: they hold for every batch size
    warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
    # the TorchScript-based exporter and torch.jit announce their successors
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    # GRU / LSTM with a batch other than 1: a problem only when h0 is not an input; here it is (rnn_states)
    warnings.filterwarnings("ignore", message="Exporting a model to ONNX with a batch_size other than 1")
