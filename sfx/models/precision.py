"""Which precision the built-in image encoders compute in (``--mixed_precision``).

``bf16``: the convolutions and the encoder's fc run under ``torch.autocast`` in bfloat16; the
weights stay float32 (the optimizer updates float32 master weights, gradients arrive in float32)
and the encoder's output is cast back to float32, so the recurrent core, the heads, the value
targets and the losses are all float32. ``off``: everything float32. ``auto`` (default): ``bf16``
where the hardware computes bfloat16 natively (a CPU with AVX512-BF16 or AMX, a CUDA GPU that
supports bfloat16), ``off`` elsewhere (emulated bfloat16 is slower than float32).

Measured (doom 128x72, convnet_simple + LSTM 512, batch 2048, one learner step on this project's
2-core AVX512-BF16 CPU machine, 1 thread): float32 3.66 s, float32 channels_last 2.86 s,
bfloat16 encoder + channels_last 1.85 s (``bench/learner_step.py``).

Vector (MLP) encoders and custom encoders are left alone.

``--tf32`` (:func:`apply_tf32`, once per process that computes on a GPU): float32 matrix products and
convolutions on TensorFloat-32 tensor cores, or strictly float32 (both).
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import torch

from sfx.errors import ConfigError
from sfx.models.device import select_device

log = logging.getLogger(__name__)

MIXED_PRECISION_CHOICES = ("auto", "bf16", "off")
_CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@functools.lru_cache(maxsize=None)
def cpu_has_native_bf16() -> bool:
    """True when this CPU computes bfloat16 in hardware (AVX512-BF16 or AMX)."""
    try:  # oneDNN's own answer where this torch build has it
        if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
            return False
    except (AttributeError, RuntimeError):
        pass
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return any(flag in flags for flag in _CPU_BF16_FLAGS)
    except OSError:
        pass
    return False


def native_bf16(device: str) -> bool:
    if device == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    return cpu_has_native_bf16()


def encoder_uses_bf16(cfg: Any) -> bool:
    """Resolve ``cfg.mixed_precision`` for the built-in image encoders."""
    mode = cfg.mixed_precision
    if mode not in MIXED_PRECISION_CHOICES:
        raise ConfigError(f"--mixed_precision={mode} is not known; allowed: {', '.join(MIXED_PRECISION_CHOICES)}")
    if mode == "off":
        return False
    device = select_device(cfg).type
    native = native_bf16(device)
    if mode == "auto":
        return native
    if not native:
        _warn_emulated(device)
    return True


@functools.lru_cache(maxsize=None)
def _warn_emulated(device: str) -> None:
    log.warning("--mixed_precision=bf16 on a %s without native bfloat16: it is emulated and slower than "
                "float32 here (--mixed_precision=auto picks float32 on such hardware)", device)


def apply_tf32(cfg: Any) -> None:
    """Set this process's TF32 switches from ``cfg.tf32`` (matrix products and cuDNN convolutions alike: PyTorch's
    own default, TF32 convolutions and float32 matrix products, is neither of the two choices)."""
    enabled = bool(cfg.tf32)
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled
