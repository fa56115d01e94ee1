"""One learner step of the doom benchmark model, in the precisions and memory layouts sfx can use.

    python -m bench.learner_step [--threads=1] [--steps=5] [--batch_size=2048] [--env=doom_basic]

The model is sfx's own (``create_actor_critic``: convnet_simple + LSTM 512 for 128x72 RGB, as in
``bench.throughput``); one step is the learner's forward over ``batch_size / rollout`` sequences of
``rollout`` steps, a loss over both heads, backward and an Adam step, on random uint8 frames.
Variants, each in this process one after the other with the same weights and batch:

- ``float32, NCHW``: what sfx did before the encoder used channels_last;
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

import torch


def build(args: argparse.Namespace, mixed_precision: str):
    from sfx.cfg import parse_args
    from sfx.engine.coordinator import probe_env
    from sfx.models import create_actor_critic

    cfg = parse_args([f"--env={args.env}", "--res_w=128", "--res_h=72", "--wide_aspect_ratio=False",
                      "--use_rnn=True", "--rnn_type=lstm", "--hidden_size=512", f"--rollout={args.rollout}", f"--recurrence={args.rollout}",
                      f"--mixed_precision={mixed_precision}", f"--train_dir={tempfile.gettempdir()}"], resume=False)
    info = probe_env(cfg)
    torch.manual_seed(0)
    return create_actor_critic(cfg, info.observation_space, info.action_space).train(), info


def to_nchw(model: torch.nn.Module) -> None:
    """The layout sfx used before: contiguous (NCHW) weights and inputs."""
    model._chw_keys.clear()  # frames stay NCHW from uint8 on
    model.encoder.memory_format = torch.contiguous_format
    model.encoder.convs.to(memory_format=torch.contiguous_format)


def time_variant(model: torch.nn.Module, obs: torch.Tensor, steps: int) -> tuple[float, float]:
    n, T = obs.shape[:2]
    init = torch.zeros(n, model.rnn_state_size)
    resets = torch.zeros(n, T, dtype=torch.bool)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)

    def step() -> None:
        out = model.forward_sequence(obs, init, resets)
        loss = out["action_params"].pow(2).mean() + out["values_normalized"].pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(2):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    train = (time.perf_counter() - t0) / steps
    with torch.no_grad():
        frames = obs[:32, 0].float() / 255.0
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
        model, info = build(args, mp)
        if nchw:
            to_nchw(model)
        obs = torch.randint(0, 256, (n, args.rollout, *info.observation_space.shape), dtype=torch.uint8,
                            generator=torch.Generator().manual_seed(0))
        train, infer = time_variant(model, obs, args.steps)
        rows.append((label, train, infer))
        print(f"{label:30s} {train * 1e3:8.0f} ms/step  {args.batch_size * 4 / train:8,.0f} frames/s  "
              f"inference of 32 frames {infer * 1e3:6.2f} ms", flush=True)
    base = rows[0][1]
    print(f"threads {args.threads}, native bf16 on this CPU: {cpu_has_native_bf16()}; speed-up per learner step: "
          + ", ".join(f"{label} {base / t:.2f}x" for label, t, _ in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
