"""Evaluation videos as animated GIFs: frames in, the same frames (shrunk) out, as a TensorBoard image."""

import io

import numpy as np
import pytest
from PIL import Image, ImageSequence

from sfx.experiment.videos import as_rgb_frame, gif_bytes, render_fps, video_summary


def frames(n, h=40, w=60):
    rng = np.random.default_rng(0)
    # blocks of flat colour (GIF keeps 256 colours: exact for these)
    return [np.kron(rng.integers(0, 256, (h // 10, w // 10, 3)), np.ones((10, 10, 1))).astype(np.uint8) for _ in range(n)]


def decode(gif):
    im = Image.open(io.BytesIO(gif))
    return im, [np.asarray(f.convert("RGB")) for f in ImageSequence.Iterator(im)]


def test_frames_come_back_in_order_with_the_frame_rate_and_looping():
    src = frames(5)
    gif, h, w = gif_bytes(src, fps=20)
    im, out = decode(gif)
    assert (h, w) == (40, 60) and im.size == (60, 40) and im.n_frames == 5
    assert im.info["duration"] == 50 and im.info["loop"] == 0
    for a, b in zip(src, out):
        assert np.abs(a.astype(int) - b.astype(int)).max() <= 8  # GIF's palette


def test_large_frames_are_shrunk_to_max_side_keeping_the_aspect():
    gif, h, w = gif_bytes(frames(2, h=400, w=600), fps=30, max_side=150)
    im, _ = decode(gif)
    assert (w, h) == (150, 100) == im.size


def test_frame_kinds_and_bad_input():
    gray = np.full((4, 6), 300.0)
    assert as_rgb_frame(gray).shape == (4, 6, 3) and as_rgb_frame(gray).max() == 255
    rgba = np.zeros((4, 6, 4), dtype=np.uint8)
    assert as_rgb_frame(rgba).shape == (4, 6, 3)
    with pytest.raises(ValueError, match=r"must be \[H, W, 3\].*got shape \(4, 6, 2\)"):
        as_rgb_frame(np.zeros((4, 6, 2)))
    with pytest.raises(ValueError, match="at least one frame"):
        gif_bytes([], fps=30)
    with pytest.raises(ValueError, match="fps=0: must be > 0"):
        gif_bytes(frames(1), fps=0)


def test_summary_holds_the_gif_as_an_image_and_render_fps_reads_metadata():
    gif, h, w = gif_bytes(frames(2), fps=10)
    value = video_summary("eval/video", gif, h, w).value[0]
    assert value.tag == "eval/video" and value.image.encoded_image_string == gif
    assert (value.image.height, value.image.width, value.image.colorspace) == (40, 60, 3)

    class Inner:
        metadata = {"render_fps": 50}

    class Adapter:
        env = Inner()

    assert render_fps(Adapter()) == 50.0 and render_fps(object()) == 30.0
