#!/usr/bin/env bash
# scripts/local_slurm/stop.sh -- stop the daemons that start.sh started, by their pid files only
# (never by name: other programs may run daemons of the same name). Safe when nothing runs.
# Queued and running jobs are cancelled first (a job's slurmstepd would outlive slurmd);
# SLURM_KEEP_JOBS=1 keeps them (they are in the saved state and resume with the next start).
set -uo pipefail

say() { echo "[local_slurm/stop] $*" >&2; }

alive() {
    local pid
    [[ -s $1 ]] || return 1
    pid=$(<"$1")
    [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && [[ $(</proc/"$pid"/comm) == "$2" ]]
}

# halt PIDFILE NAME: SIGTERM, then SIGKILL after 30 s
halt() {
    if ! alive "$1" "$2"; then
        rm -f "$1"
        return 0
    fi
    local pid i
    pid=$(<"$1")
    kill -TERM "$pid"
    for ((i = 0; i < 300; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        say "$2 (pid $pid) ignored SIGTERM: SIGKILL"
        kill -KILL "$pid"
    fi
    rm -f "$1"
    say "$2 (pid $pid) stopped"
}

if [[ ${SLURM_KEEP_JOBS:-0} != 1 ]] && alive /run/slurm/slurmctld.pid slurmctld; then
    jobs=$(squeue -h -o %i 2>/dev/null || true)
    if [[ -n $jobs ]]; then
        echo "$jobs" | xargs -r scancel 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do
            [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break
            sleep 0.2
        done
        say "jobs cancelled; left in the queue: $(squeue -h -o %i 2>/dev/null | wc -l)"
    fi
fi

halt /run/slurm/slurmctld.pid slurmctld  # first: no job may start while the rest goes down
halt /run/slurm/slurmd.pid slurmd
halt /run/slurm/slurmdbd.pid slurmdbd
halt /run/mysqld/mysqld.pid mariadbd
halt /run/munge/munged.pid munged
exit 0
