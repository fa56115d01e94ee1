"""sfx.models.scratch: large CPU tensors reused only once nothing else holds their memory."""

from __future__ import annotations

import copy
import pickle

import gymnasium as gym
import numpy as np
import torch

from sfx.engine.staging import HostStaging
from sfx.models.preprocess import ObsPreprocessor
from sfx.models.scratch import MIN_BYTES, Scratch, storage_is_shared

BIG = (1024, 512)  # 2 MB of float32


def ptr(t):
    return t.untyped_storage().data_ptr()


def test_memory_is_handed_out_again_once_the_caller_lets_it_go():
    s = Scratch()
    a = s.empty(BIG, torch.float32)
    first = ptr(a)
    del a
    assert ptr(s.empty(BIG, torch.float32)) == first


def test_memory_a_caller_still_holds_is_never_handed_out():
    s = Scratch(slots=2)
    a = s.empty(BIG, torch.float32)
    a.fill_(1.0)
    b = s.empty(BIG, torch.float32)
    assert ptr(a) != ptr(b)
    b.fill_(2.0)
    assert bool((a == 1.0).all())
    view = a[:10]  # a view keeps it too
    del a
    c = s.empty(BIG, torch.float32)
    assert ptr(c) not in (ptr(view), ptr(b))


def test_a_tensor_autograd_saved_for_backward_is_held_until_the_backward_pass():
    s = Scratch()
    lin = torch.nn.Linear(BIG[1], 3)
    x = s.empty(BIG, torch.float32)
    x.normal_()
    first = ptr(x)
    loss = lin(x).sum()  # the weight's gradient needs x
    del x
    assert ptr(s.empty(BIG, torch.float32)) != first
    loss.backward()
    del loss
    assert ptr(s.empty(BIG, torch.float32)) == first


def test_shapes_dtypes_layouts_and_small_tensors():
    s = Scratch()
    a = s.empty(BIG, torch.float32)
    first = ptr(a)
    del a
    assert ptr(s.empty((512, 1024), torch.float32)) != first  # another shape: another tensor
    del_me = s.empty((64, 3, 72, 128), torch.float32, memory_format=torch.channels_last)
    assert del_me.is_contiguous(memory_format=torch.channels_last)
    small = s.empty((4, 4), torch.float32)
    assert small.numel() * 4 < MIN_BYTES and not s._held[-1].shape == (4, 4)


def test_copies_and_pickles_of_a_model_hold_no_scratch_memory():
    s = Scratch()
    s.empty(BIG, torch.float32)
    assert len(s._held) == 1
    assert copy.deepcopy(s)._held == [] and pickle.loads(pickle.dumps(s))._held == []


def test_inference_tensors_and_normal_ones_are_not_mixed():
    s = Scratch()
    with torch.inference_mode():
        a = s.empty(BIG, torch.float32)
        assert a.is_inference()
        del a
    b = s.empty(BIG, torch.float32)
    assert not b.is_inference()
    b.add_(1.0)  # in place outside inference mode: allowed on a normal tensor


def test_storage_is_shared_counts_views():
    t = torch.zeros(10)
    assert not storage_is_shared(t)
    v = t[2:]
    assert storage_is_shared(t)
    del v
    assert not storage_is_shared(t)


def test_the_preprocessor_never_overwrites_an_image_a_caller_holds():
    space = gym.spaces.Box(0, 255, (3, 72, 128), np.uint8)
    pre = ObsPreprocessor(space, gym.spaces.Discrete(3), 255.0, 0.0, False, False)
    g = torch.Generator().manual_seed(0)
    frames = [torch.randint(0, 256, (4, 8, 3, 72, 128), generator=g, dtype=torch.uint8) for _ in range(3)]
    outs = [pre(f, batch_dims=2).x for f in frames]  # all three held at once
    for f, out in zip(frames, outs):
        assert torch.equal(out, f.reshape(32, 3, 72, 128).float() / 255.0)
    held = {ptr(h) for h in pre._scratch._held}  # the two newest of the three
    assert len(held) == 2 and ptr(outs[0]) not in held
    del outs
    again = pre(frames[0], batch_dims=2).x  # nothing holds the old ones: their memory comes back
    assert torch.equal(again, frames[0].reshape(32, 3, 72, 128).float() / 255.0)
    assert ptr(again) in held


def test_cpu_staging_gathers_rows_into_memory_no_holder_sees_changed():
    staging = HostStaging(torch.device("cpu"))
    flat = torch.arange(4096 * 300, dtype=torch.float32).reshape(4096, 300)
    a = staging.gather("x", flat, torch.arange(0, 2048))
    b = staging.gather("x", flat, torch.arange(2048, 4096))
    assert torch.equal(a, flat[:2048]) and torch.equal(b, flat[2048:])
