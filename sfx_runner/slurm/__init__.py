"""The parts of the slurm backend (:mod:`sfx_runner.backends.slurm`, which re-exports every name),
one module per section:

    flags.py       --slurm_timeout and the --slurm_sbatch_template file
    cluster.py     partitions and nodes as sinfo reports them; running the Slurm client commands
    resources.py   what each array task asks for (nodes x tasks, CPUs, GPUs), checked against the cluster
    job.py         inside the job: ExperimentJob, the callable submitit pickles, runs (once per task of a
                   multi-task job: one rank each) and requeues (warning signal, lost ranks)
    watch.py       squeue / sacct: which jobs may still run, how the ended ones ended

They live outside ``sfx_runner.backends`` so that choosing a backend loads one module there
(``get_backend``), and they are loaded only with the slurm backend. Nothing here imports submitit
at import time.
"""
