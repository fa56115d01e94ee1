"""One learner step of the doom benchmark model, in the precisions and memory layouts sfx can use.

    python -m bench.learner_step [--threads=1] [--steps=5] [--batch_size=2048] [--env=doom_basic]

The model is sfx's own (``create_actor_critic``: convnet_simple + LSTM 512 for 128x72 RGB, as in
``bench.throughput``); one step is the learner's own ``learning_step`` (``sfx.engine.learner``:
forward over ``batch_size / rollout`` trajectories of ``rollout`` steps, V-trace targets, the APPO
loss, backward, gradient clipping and an Adam step) on a synthetic minibatch shaped like the
trajectory buffers: random uint8 frames, a random behaviour policy, random rewards with episode
ends. Variants, each in this process one after the other with the same weights and batch:

- ``float32, NCHW``: what sfx did before the encoder used channels_last (the encoder's convolutions
  and their inputs in the contiguous layout; the frames still arrive channels_last, so this row
  also pays one float layout copy of the batch);
- ``float32, channels_last``: ``--mixed_precision=off``;
- ``bf16 encoder, channels_last``: ``--mixed_precision=bf16`` (``auto`` picks it on hardware with
  native bfloat16);

and the encoder's inference on 32 frames (a policy worker's batch). Printed as ms per step and
as the learner's frame limit (batch x frameskip 4 / step time), with ratios to the first row.
Figures only; nothing passes or fails.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

import torch


def build(args: argparse.Namespace, mixed_precision: str):
    from sfx.registries import parse_args
    from sfx.engine.coordinator import probe_env
    from sfx.models import create_actor_critic

    cfg = parse_args([f"--env={args.env}", "--res_w=128", "--res_h=72", "--wide_aspect_ratio=False",
                      "--use_rnn=True", "--rnn_type=lstm", "--hidden_size=512", f"--rollout={args.rollout}",
                      f"--recurrence={args.rollout}", f"--batch_size={args.batch_size}",
                      f"--mixed_precision={mixed_precision}", f"--train_dir={tempfile.gettempdir()}"], resume=False)
    info = probe_env(cfg)
    torch.manual_seed(0)
    return create_actor_critic(cfg, info.observation_space, info.action_space).train(), cfg


def to_nchw(model: torch.nn.Module) -> None:
    """The layout sfx used before: contiguous (NCHW) convolution weights and inputs."""
    model.encoder.memory_format = torch.contiguous_format
    model.encoder.convs.to(memory_format=torch.contiguous_format)


def synthetic_batch(model: Any, n: int, rollout: int, seed: int = 0) -> tuple[dict[str, Any], torch.Tensor]:
    """A learner minibatch of ``n`` trajectories, with the keys, shapes and dtypes of
    ``TrajectoryBuffers.tensors()``, and its valid mask (all valid, as with no policy lag)."""
    from sfx.algo.distributions import make_action_distribution
    from sfx.engine.buffers import torch_dtype
    from sfx.models.obs import obs_spec

    g = torch.Generator().manual_seed(seed)
    T = rollout
    obs = {}
    for key, (shape, dtype) in obs_spec(model.obs_space).items():
        dt = torch_dtype(dtype)
        obs[key] = (torch.randint(0, 256, (n, T + 1, *shape), dtype=dt, generator=g) if not dt.is_floating_point
                    else torch.randn((n, T + 1, *shape), generator=g).to(dt))
    params = torch.randn(n, T, model.action_params_size, generator=g) * 0.5
    behaviour = make_action_distribution(model.action_space, params.reshape(n * T, -1))
    torch.manual_seed(seed)
    actions = behaviour.sample().reshape(n, T, -1).float()
    terminated = torch.rand(n, T, generator=g) < 0.02
    batch = {
        "obs": obs,
        "rnn_states": torch.zeros(n, T + 1, max(model.rnn_state_size, 1)),
        "actions": actions,
        "log_probs": behaviour.log_prob(actions.reshape(n * T, -1)).reshape(n, T),
        "action_params": params,
        "values": torch.randn(n, T, generator=g),
        "rewards": torch.randn(n, T, generator=g),
        "terminated": terminated,
        "truncated": (torch.rand(n, T, generator=g) < 0.01) & ~terminated,
        "trunc_values": torch.randn(n, T, generator=g),
        "policy_versions": torch.zeros(n, T, dtype=torch.int64),
        "active": torch.ones(n, T, dtype=torch.bool),
    }
    return batch, torch.ones(n, T, dtype=torch.bool)


def time_variant(model: torch.nn.Module, cfg: Any, mb: dict[str, Any], valids: torch.Tensor,
                 steps: int) -> tuple[float, float]:
    from sfx.agents.appo import learning_step, make_optimizer

    opt = make_optimizer(cfg, model)
    for _ in range(2):
        learning_step(model, opt, mb, valids, cfg)
    t0 = time.perf_counter()
    for _ in range(steps):
        learning_step(model, opt, mb, valids, cfg)
    train = (time.perf_counter() - t0) / steps
    with torch.no_grad():
        frames = next(iter(mb["obs"].values()))[:32, 0].float() / 255.0
        model.encoder(frames)
        t0 = time.perf_counter()
        for _ in range(20):
            model.encoder(frames)
        infer = (time.perf_counter() - t0) / 20
    return train, infer


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1, help="torch threads (the learner gets cores - workers)")
    p.add_argument("--steps", type=int, default=5, help="timed steps per variant (after 2 warm-up steps)")
    p.add_argument("--batch_size", type=int, default=2048)
    p.add_argument("--rollout", type=int, default=32)
    p.add_argument("--env", default="doom_basic")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from sfx.models.precision import cpu_has_native_bf16

    n = args.batch_size // args.rollout
    rows = []
    for label, mp, nchw in [("float32, NCHW", "off", True), ("float32, channels_last", "off", False),
                            ("bf16 encoder, channels_last", "bf16", False)]:
        model, cfg = build(args, mp)
        if nchw:
            to_nchw(model)
        mb, valids = synthetic_batch(model, n, args.rollout)
        train, infer = time_variant(model, cfg, mb, valids, args.steps)
        rows.append((label, train, infer))
        print(f"{label:30s} {train * 1e3:8.0f} ms/step  {args.batch_size * 4 / train:8,.0f} frames/s  "
              f"inference of 32 frames {infer * 1e3:6.2f} ms", flush=True)
    base = rows[0][1]
    print(f"threads {args.threads}, native bf16 on this CPU: {cpu_has_native_bf16()}; speed-up per learner step: "
          + ", ".join(f"{label} {base / t:.2f}x" for label, t, _ in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
