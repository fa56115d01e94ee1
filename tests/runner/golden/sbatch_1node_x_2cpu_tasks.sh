#!/bin/bash

# Parameters
#SBATCH --cpus-per-task=1
#SBATCH --job-name=golden
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=2
#SBATCH --open-mode=append
#SBATCH --output=/train_dir/golden/.runner/slurm/%j/%j_0_log.out
#SBATCH --partition=gpu
#SBATCH --signal=USR2@120
#SBATCH --time=120
#SBATCH --wckey=submitit

# setup
export SFX_RUNNER_CODE_ROOT=/src/sfx
export PYTHONPATH=/src/sfx${PYTHONPATH:+:$PYTHONPATH}

# command
export SUBMITIT_EXECUTOR=slurm
srun --unbuffered --output /train_dir/golden/.runner/slurm/%j/%j_%t_log.out --kill-on-bad-exit=1 /venv/bin/python -u -m submitit.core._submit /train_dir/golden/.runner/slurm/%j

