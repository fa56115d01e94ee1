"""Learning test (slow): a Transformer-XL core learns MiniGrid's memory task; an agent without a core cannot.

The task: ``MiniGrid-MemoryS7-v0`` seen through a 3x3 view (``--minigrid_agent_view_size=3``). The
agent is shown an object in the start room, walks down a short hallway and must step onto the
matching one of the two objects at its end; from no pose does the 3x3 view show the start object
together with an end object, so without a memory the best policy guesses (success 0.5). The command
line is the one the README publishes ("Memory tasks"): the ``minigrid_`` family's defaults and
``--rnn_type=trxl`` with sfx's TrXL defaults (2 layers, ``--mem_len=64``), nothing tuned for the
test; the test only adds the frame budget, the stop and this machine's scale.

Measured on this 2-core machine before writing the bar (seeds 1-3, ``--stop_at_reward=0.9``: the
average episode reward of the last 100 episodes, which needs a success rate of at least 0.9), see
the README's table: the TrXL agent reached it after 0.22M-0.31M env steps (2,400-2,500 FPS), an
agent without a core stayed at 0.45-0.6 for 0.5M steps and more (2.15M in an earlier run). The
budget, 0.6M steps, leaves room; the agent without a core is then trained for exactly as many env
steps as the TrXL agent used (equal frames) and must stay below 0.75.

A run can stall on the guessing plateau: on 2026-11-29 (engine e702dfc) seed 0 reached the bar after
0.13M-0.15M env steps in three runs here and seeds 1-3 after 0.13M, 0.17M, 0.19M, but one CI run of
seed 0 (the engine is asynchronous: the same seed does not repeat its batches) stayed at success
0.5-0.6 until 0.28M and ended at 0.73-0.85 at 0.6M. So the TrXL line gets a second seed when the
first misses the bar, and fails only when both miss: a core that stopped learning the task misses
with every seed, where a stall as rare as that one (the first in this test's CI runs) has to happen
twice in a row. The agent without a core is then compared at the frames of the seed that reached it.
"""

import shlex
import re
import time

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from sfx.registries import parse_args
from sfx.engine import run_training
from sfx.experiment import summary_dir

PUBLISHED = ("python -m sfx.train --env=minigrid_MemoryS7 --minigrid_agent_view_size=3 --rnn_type=trxl "
             "--train_for_env_steps=600000 --stop_at_reward=0.9 --experiment=memory_trxl")
APPENDED = "--train_for_seconds=420 --experiment_summaries_interval=5"
SEEDS = (0, 1)  # the second only when the first misses the bar
BUDGET = 600_000
SUCCESS_BAR = 0.9
NO_CORE_CEILING = 0.75


def success_curve(cfg) -> list[tuple[int, float]]:
    acc = EventAccumulator(str(summary_dir(cfg, 0)))
    acc.Reload()
    return [(e.step, round(e.value, 2)) for e in acc.Scalars("episode/success")]


def train(argv: list[str]):
    cfg = parse_args(argv)
    start = time.time()
    result = run_training(cfg)
    return cfg, result, time.time() - start


@pytest.mark.extended  # in ./all_tests.sh only with SFX_EXTENDED=1 (pytest.ini says why)
@pytest.mark.slow
@pytest.mark.timeout(1200)  # two TrXL runs of at most 420 s, then the agent without a core
def test_trxl_learns_memory_s7_that_no_core_cannot_at_equal_frames(tmp_path):
    misses = []
    for seed in SEEDS:
        argv = (shlex.split(PUBLISHED)[3:] + shlex.split(APPENDED)
                + [f"--seed={seed}", f"--train_dir={tmp_path / f'seed{seed}'}"])
        cfg, result, elapsed = train(argv)
        curve = success_curve(cfg)
        print(f"TrXL seed {seed}: {result['env_steps']:,} env steps in {elapsed:.0f} s "
              f"({result['samples_per_sec']:.0f} samples/s), success by env steps: {curve}")
        assert result["status"] == "done"
        log_text = (tmp_path / f"seed{seed}" / "memory_trxl" / "sf_log.txt").read_text()
        if f"reached --stop_at_reward={SUCCESS_BAR:g}" in log_text:
            break
        misses.append((seed, result["env_steps"], curve))
    else:
        pytest.fail(f"the TrXL line missed success {SUCCESS_BAR} within {BUDGET:,} env steps with every seed: {misses}")
    assert result["env_steps"] <= BUDGET
    # the bar as the trainer measured it: the mean reward of the policy's last 100 episodes; MiniGrid pays a
    # reward (at most 1) only for a success, so their success rate is at least that. The summary curve's points
    # are means over each 5-s summary window (a few dozen episodes), not that 100-episode mean: its last point
    # was 0.86 in a run whose last 100 episodes averaged a reward of 0.91 (2026-12-02)
    reached = re.search(r"average reward ([0-9.]+) over its last 100 episodes reached --stop_at_reward", log_text)
    assert reached and float(reached.group(1)) >= SUCCESS_BAR, (log_text[-2000:], curve)

    # the same line without a core, for as many env steps as the TrXL agent took
    frames = max(result["env_steps"], 200_000)
    argv_none = argv + ["--use_rnn=False", "--experiment=memory_no_core", f"--train_for_env_steps={frames}"]
    cfg_none, result_none, elapsed_none = train(argv_none)
    curve_none = success_curve(cfg_none)
    print(f"no core: {result_none['env_steps']:,} env steps in {elapsed_none:.0f} s, success by env steps: {curve_none}")
    assert result_none["status"] == "done" and result_none["env_steps"] >= frames
    # the first points average few, long episodes; from 50k steps on each is the mean of 100 episodes
    settled = [v for step, v in curve_none if step >= 50_000]
    assert settled and max(settled) < NO_CORE_CEILING, curve_none
