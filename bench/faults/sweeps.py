"""The sweeps the injector drives, as run descriptions written into the train_dir (the runner loads a file).

- ``small``: three CartPole trainings, one with ``--inference=learner`` (the issue's first reproduction);
- ``suite``: the slow suite's (tests/faults/test_fault_schedule.py): two CartPole trainings (one with
  ``--inference=learner``) and a doom_basic one, whose game processes the ``kill_doom`` faults hit;
- ``full``: five at once: a 4-policy PBT self-play doom_duel, a CartPole as 2 ranks (torchrun), R2D2 on
  CartPole and SAC on Pendulum with ``--save_replay_buffer``, a CartPole with ``--inference=learner`` and an
  evaluator.
Budgets are sized for a loaded 2-core machine and short heartbeat timeouts, so a hang is seen in seconds.
"""

from __future__ import annotations

from pathlib import Path

from bench.faults.schedule import FaultInputError

COMMON = ("--device=cpu --set_workers_cpu_affinity=False --save_every_sec=5 --heartbeat_timeout_sec=10 "
          "--report_every_sec=2 --seed=1")
CARTPOLE = (f"python -m sfx.train --env=gym_CartPole-v1 --num_workers=2 --num_envs_per_worker=4 --hidden_size=64 "
            f"--use_rnn=False --batch_size=256 {COMMON}")

SMALL = f'''
from sfx_runner import Experiment, ParamGrid, RunDescription
CARTPOLE = {CARTPOLE!r}
RUN_DESCRIPTION = RunDescription("faults_small", [
    Experiment("pw", CARTPOLE + " --train_for_env_steps={{steps}}", ParamGrid([("learning_rate", [0.0003, 0.001])])),
    Experiment("li", CARTPOLE + " --train_for_env_steps={{steps}} --inference=learner"),
])
'''

SUITE = f'''
from sfx_runner import Experiment, RunDescription
COMMON = {COMMON!r}
CARTPOLE = {CARTPOLE!r}
RUN_DESCRIPTION = RunDescription("faults_suite", [
    Experiment("pw", CARTPOLE + " --train_for_env_steps={{steps}}"),
    Experiment("li", CARTPOLE + " --train_for_env_steps={{steps}} --inference=learner"),
    Experiment("doom", "python -m sfx.train --env=doom_basic --num_workers=1 --num_envs_per_worker=2 "
               "--worker_num_splits=1 --batch_size=256 --hidden_size=64 --train_for_env_steps={{doom_steps}} " + COMMON),
])
'''

FULL = f'''
from sfx_runner import Experiment, RunDescription
COMMON = {COMMON!r}
CARTPOLE = {CARTPOLE!r}
RUN_DESCRIPTION = RunDescription("faults_full", [
    Experiment("pbt_duel", "python -m sfx.train --env=doom_duel --num_workers=2 --num_envs_per_worker=2 "
               "--worker_num_splits=2 --res_w=64 --res_h=48 --rollout=32 --recurrence=32 --batch_size=512 "
               "--use_rnn=True --hidden_size=128 --num_policies=4 --with_pbt=True --pbt_period_env_steps=20000 "
               "--pbt_start_mutation=20000 --pbt_replace_fraction=0.25 --doom_timelimit_min=0.25 "
               "--train_for_env_steps={{doom_steps}} " + COMMON
               # its rollout workers start a new match (the game processes of 2 players) inside the run, which on
               # the loaded 2-core machine took more than 10 s: a heartbeat timeout stopped the training each time
               # (measured in a 150-s smoke run, 12 restarts at 0 env steps)
               + " --heartbeat_timeout_sec=60"),
    Experiment("ranks2", "python -m torch.distributed.run --standalone --nproc_per_node=2 --max_restarts=3 -m "
               + CARTPOLE.split(" -m ", 1)[1] + " --train_for_env_steps={{steps}} --num_workers=1 "
               "--distributed_timeout_sec=60"),
    Experiment("r2d2", "python -m sfx.train --env=gym_CartPole-v1 --algo=R2D2 --num_workers=1 --num_envs_per_worker=4 "
               "--hidden_size=64 --save_replay_buffer=True --train_for_env_steps={{steps}} " + COMMON),
    Experiment("sac", "python -m sfx.train --env=gym_Pendulum-v1 --algo=SAC --num_workers=1 --num_envs_per_worker=2 "
               "--hidden_size=64 --batch_size=64 --save_replay_buffer=True --train_for_env_steps={{sac_steps}} "
               # SEED's replay ratio (256) made its learner the whole sweep's bottleneck here (4 env steps/s), and a
               # 1M-transition buffer made each checkpoint 61 MB: the sweep tests recovery, not SAC's learning
               "--replay_ratio=16 --replay_buffer_size=20000 " + COMMON),
    Experiment("li_eval", CARTPOLE + " --inference=learner --eval_every_env_steps=20000 "
               "--train_for_env_steps={{steps}}"),
])
'''

RUNNER_ARGS = ["--num_gpus=0", "--pause_between=0", "--experiment_restarts=20", "--restart_backoff_sec=2",
               "--stop_timeout_sec=30"]


def run_file_for(sweep: str, train_dir: Path, steps: int = 200_000) -> tuple[Path, str, list[str]]:
    """(run description file, run name, runner flags) of ``sweep`` (``small``, ``full`` or a file)."""
    train_dir.mkdir(parents=True, exist_ok=True)
    if sweep == "small":
        path = train_dir / "faults_small_run.py"
        path.write_text(SMALL.replace("{steps}", str(steps)))
        return path, "faults_small", RUNNER_ARGS + ["--max_parallel=3"]
    if sweep == "suite":
        path = train_dir / "faults_suite_run.py"
        path.write_text(SUITE.replace("{steps}", str(steps)).replace("{doom_steps}", str(steps // 2)))
        return path, "faults_suite", RUNNER_ARGS + ["--max_parallel=3"]
    if sweep == "full":
        path = train_dir / "faults_full_run.py"
        path.write_text(FULL.replace("{steps}", str(steps)).replace("{doom_steps}", str(steps // 2))
                        .replace("{sac_steps}", str(steps // 20)))
        return path, "faults_full", RUNNER_ARGS + ["--max_parallel=5"]
    path = Path(sweep)
    if not path.is_file():
        raise FaultInputError(f"--sweep={sweep!r}: not small, full, nor a run description file")
    import importlib.util

    spec = importlib.util.spec_from_file_location("faults_run", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return path, module.RUN_DESCRIPTION.run_name, RUNNER_ARGS
