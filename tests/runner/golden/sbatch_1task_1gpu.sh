#!/bin/bash

# Parameters
#SBATCH --array=0-1%2
#SBATCH --cpus-per-task=16
#SBATCH --gpus-per-node=1
#SBATCH --job-name=golden
#SBATCH --nodes=1
#SBATCH --open-mode=append
#SBATCH --output=/train_dir/golden/.runner/slurm/%A_%a/%A_%a_0_log.out
#SBATCH --partition=gpu
#SBATCH --signal=USR2@120
#SBATCH --time=120
#SBATCH --wckey=submitit

# setup
export SFX_RUNNER_CODE_ROOT=/src/sfx
export PYTHONPATH=/src/sfx${PYTHONPATH:+:$PYTHONPATH}

# command
export SUBMITIT_EXECUTOR=slurm
srun --unbuffered --output /train_dir/golden/.runner/slurm/%A_%a/%A_%a_%t_log.out /venv/bin/python -u -m submitit.core._submit /train_dir/golden/.runner/slurm/%j

