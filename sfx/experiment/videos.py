"""Short videos of episodes for the experiment's summaries: animated GIFs TensorBoard shows.

TensorBoard has no video plugin of its own: its Images tab plays an animated GIF stored as an image
summary (``torch.utils.tensorboard``'s ``add_video`` writes the same thing, but needs moviepy to
encode it). Here Pillow encodes the GIF, so nothing beyond what the envs' rendering already needs is
installed. Frames larger than ``max_side`` pixels on their long side are shrunk (a DOOM screen at
full size would make every evaluation's GIF several MB).
"""

from __future__ import annotations

import io
from typing import Any, Sequence

import numpy as np

DEFAULT_RENDER_FPS = 30
VIDEO_MAX_SIDE = 256  # pixels on the long side of a summary video's frames


def as_rgb_frame(frame: Any) -> np.ndarray:
    """``[H, W, 3]`` (or ``[H, W]``) numbers -> ``[H, W, 3]`` uint8; values outside 0..255 are clipped."""
    a = np.asarray(frame)
    if a.ndim == 2:
        a = np.repeat(a[:, :, None], 3, axis=2)
    if a.ndim != 3 or a.shape[2] not in (3, 4):
        raise ValueError(f"a video frame must be [H, W, 3] (RGB), [H, W, 4] or [H, W]; got shape {a.shape}")
    if a.dtype != np.uint8:
        a = np.clip(a, 0, 255).astype(np.uint8)
    return a[:, :, :3]


def render_fps(env: Any, default: float = DEFAULT_RENDER_FPS) -> float:
    """The env's ``metadata["render_fps"]`` (the one-agent adapter keeps the gymnasium env in ``.env``)."""
    metadata = getattr(env, "metadata", None) or getattr(getattr(env, "env", None), "metadata", None) or {}
    return float(metadata.get("render_fps") or default)


def gif_bytes(frames: Sequence[Any], fps: float, max_side: int = VIDEO_MAX_SIDE) -> tuple[bytes, int, int]:
    """Frames -> ``(an animated GIF that loops, its height, its width)``, each frame shown ``1 / fps`` s,
    shrunk to at most ``max_side`` pixels on the long side (aspect kept)."""
    from PIL import Image

    if not frames:
        raise ValueError("a video needs at least one frame")
    if not fps > 0:
        raise ValueError(f"fps={fps!r}: must be > 0")
    images = [Image.fromarray(as_rgb_frame(f)) for f in frames]
    w, h = images[0].size
    scale = min(1.0, max_side / max(w, h))
    if scale < 1.0:
        size = (max(1, round(w * scale)), max(1, round(h * scale)))
        images = [im.resize(size, Image.BILINEAR) for im in images]
    w, h = images[0].size
    buf = io.BytesIO()
    # GIF durations are in 10 ms units: 30 fps plays at 33 ms (Pillow rounds)
    images[0].save(buf, format="GIF", save_all=True, append_images=images[1:], duration=max(10, round(1000 / fps)),
                   loop=0, optimize=False)
    return buf.getvalue(), h, w


def video_summary(tag: str, gif: bytes, height: int, width: int) -> Any:
    """A TensorBoard ``Summary`` holding ``gif`` as an image (the Images tab plays it)."""
    from tensorboard.compat.proto.summary_pb2 import Summary

    image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=gif)
    return Summary(value=[Summary.Value(tag=tag, image=image)])
