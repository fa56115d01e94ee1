#!/usr/bin/env bash
# scripts/local_slurm/start.sh -- a real single-node Slurm cluster on this machine, for the
# runner's Slurm tests (tests/runner/test_slurm.py) and for trying the slurm backend locally.
#
# Needs: Debian/Ubuntu, root, no systemd required (every daemon is started by hand).
# Idempotent: when everything is up it only checks (< 1 s); a changed knob rewrites the config
# and restarts slurmctld + slurmd (don't do that while jobs run). Stop with stop.sh.
#
# What runs afterwards (each daemon tracked by its own pid file, stop.sh uses only those):
#   munged (auth)  mariadbd + slurmdbd (accounting: sacct)  slurmctld (controller)  slurmd (node)
# One partition "debug" (the default) with one node named after this host.
#
# Knobs (environment variables):
#   SLURM_CPUS=N           CPUs the node offers (default: nproc). More than the real count
#                          oversubscribes the machine.
#   SLURM_FAKE_GPUS=N      GPUs the node offers (default 2). They are /dev/null look-alikes: jobs
#                          that ask for GPUs are accepted and get CUDA_VISIBLE_DEVICES, nothing
#                          more. 0 = no GPU gres at all (then any GPU request is rejected).
#   SLURM_REQUEUE_DELAY=S  seconds a requeued job waits before it may start again (default 10;
#                          Slurm's own default, 120, makes requeue tests slow).
#   SLURM_ACCOUNTING=0     no MariaDB/slurmdbd. Not recommended: submitit polls job states with
#                          sacct, and without it a job killed before writing its result (scancel,
#                          time limit) is never seen as finished.
#   SLURM_CLEAN=1          forget old jobs (controller state + accounting DB; ids restart at 1);
#                          applied only when slurmctld is (re)started by this call.
#   SLURM_NO_INSTALL=1     fail instead of apt-get installing missing packages.
set -euo pipefail

say() { echo "[local_slurm/start] $*" >&2; }
die() { say "error: $*"; exit 1; }

[[ $(id -u) == 0 ]] || die "must run as root (it installs packages and starts system daemons)"
command -v dpkg-query >/dev/null || die "needs a Debian-based system (dpkg/apt)"

ACCOUNTING=${SLURM_ACCOUNTING:-1}
NODE=$(hostname -s)
CPUS=${SLURM_CPUS:-$(nproc)}
GPUS=${SLURM_FAKE_GPUS:-2}
REQUEUE_DELAY=${SLURM_REQUEUE_DELAY:-10}
[[ $CPUS =~ ^[1-9][0-9]*$ ]] || die "SLURM_CPUS='$CPUS' is not a positive integer"
[[ $GPUS =~ ^[0-9]+$ ]] || die "SLURM_FAKE_GPUS='$GPUS' is not a non-negative integer"
[[ $REQUEUE_DELAY =~ ^[1-9][0-9]*$ ]] || die "SLURM_REQUEUE_DELAY='$REQUEUE_DELAY' is not a positive integer"

ETC=/etc/slurm
PIDS=/run/slurm
LOGS=/var/log/slurm
CTL_STATE=/var/spool/slurmctld
NODE_SPOOL=/var/spool/slurmd
MUNGE_PIDFILE=/run/munge/munged.pid
DB_PIDFILE=/run/mysqld/mysqld.pid
DBD_PIDFILE=$PIDS/slurmdbd.pid
CTLD_PIDFILE=$PIDS/slurmctld.pid
SLURMD_PIDFILE=$PIDS/slurmd.pid

# ---------------------------------------------------------------- helpers
# alive PIDFILE NAME: the pid in PIDFILE runs and is the program NAME (a stale pid file may
# point at a recycled pid that belongs to someone else)
alive() {
    local pid
    [[ -s $1 ]] || return 1
    pid=$(<"$1")
    [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && [[ $(</proc/"$pid"/comm) == "$2" ]]
}
# retry SECONDS CMD...: run CMD every 0.2 s until it succeeds
retry() {
    local n=$(($1 * 5)) i
    shift
    for ((i = 0; i < n; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    return 1
}
# halt PIDFILE NAME: SIGTERM the daemon, SIGKILL after 15 s
halt() {
    if alive "$1" "$2"; then
        local pid i
        pid=$(<"$1")
        kill -TERM "$pid"
        for ((i = 0; i < 150; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
        say "stopped $2 (pid $pid) to apply a new config"
    fi
    rm -f "$1"
}
# put_file PATH MODE < content: replace PATH only when the content differs; status 0 = changed
put_file() {
    local new
    new=$(mktemp)
    cat >"$new"
    if cmp -s "$new" "$1"; then
        rm -f "$new"
        return 1
    fi
    install -m "$2" "$new" "$1"
    rm -f "$new"
    say "wrote $1"
}
tcp_listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# ---------------------------------------------------------------- 1. packages
wanted=(munge slurm-client slurmctld slurmd)
((ACCOUNTING)) && wanted+=(mariadb-server slurmdbd)
missing=()
for pkg in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    [[ ${SLURM_NO_INSTALL:-0} == 1 ]] && die "packages not installed: ${missing[*]} (SLURM_NO_INSTALL=1)"
    say "installing ${missing[*]} (apt-get, once)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # without recommends: the slurm-wlm meta package would pull in ~40 plugin packages
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

getent hosts "$NODE" >/dev/null || echo "127.0.0.1 $NODE" >>/etc/hosts
install -d -m 0755 "$ETC" "$PIDS" "$LOGS" "$CTL_STATE" "$NODE_SPOOL"

# ---------------------------------------------------------------- 2. munge (authentication)
[[ -s /etc/munge/munge.key ]] || mungekey --create --keyfile=/etc/munge/munge.key
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
# /run is a tmpfs: its folders vanish with every reboot / container start
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge
if ! alive "$MUNGE_PIDFILE" munged; then
    rm -f "$MUNGE_PIDFILE"
    # munged refuses to run as any user but the key's owner; it forks by itself
    runuser -u munge -- /usr/sbin/munged
    retry 10 bash -c 'munge -n | unmunge' || { tail -5 /var/log/munge/munged.log >&2; die "munge does not work"; }
    say "munged up (pid $(<"$MUNGE_PIDFILE"))"
fi

# ---------------------------------------------------------------- 3. accounting
if ((ACCOUNTING)); then
    install -d -o mysql -g mysql -m 0755 /run/mysqld
    [[ -d /var/lib/mysql/mysql ]] || mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
    if ! alive "$DB_PIDFILE" mariadbd; then
        rm -f "$DB_PIDFILE"
        # mariadbd stays in the foreground: detach it. Unix socket only, no TCP port; root logs
        # in through unix_socket authentication, so slurmdbd needs no password.
        setsid -f /usr/sbin/mariadbd --user=mysql --skip-networking \
            --pid-file="$DB_PIDFILE" --socket=/run/mysqld/mysqld.sock \
            --innodb-buffer-pool-size=128M --innodb-lock-wait-timeout=900 \
            >>/var/log/mariadb-local-slurm.log 2>&1 </dev/null
        retry 60 mariadb-admin ping || { tail -20 /var/log/mariadb-local-slurm.log >&2; die "mariadbd did not start"; }
        retry 10 test -s "$DB_PIDFILE" || true
        say "mariadbd up (pid $(cat "$DB_PIDFILE" 2>/dev/null || echo '?'))"
    fi
    if put_file "$ETC/slurmdbd.conf" 0600 <<EOF; then
# written by scripts/local_slurm/start.sh
AuthType=auth/munge
DbdHost=$NODE
DbdAddr=127.0.0.1
SlurmUser=root
PidFile=$DBD_PIDFILE
LogFile=$LOGS/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=slurm_acct_db
EOF
        halt "$DBD_PIDFILE" slurmdbd
    fi
    if ! alive "$DBD_PIDFILE" slurmdbd; then
        rm -f "$DBD_PIDFILE"
        if [[ ${SLURM_CLEAN:-0} == 1 ]] && ! alive "$CTLD_PIDFILE" slurmctld; then
            mariadb -e "DROP DATABASE IF EXISTS slurm_acct_db"
            say "accounting database dropped (SLURM_CLEAN=1)"
        fi
        /usr/sbin/slurmdbd  # forks; makes its tables on the first start
        retry 60 tcp_listening 6819 || { tail -20 "$LOGS/slurmdbd.log" >&2; die "slurmdbd did not start"; }
        say "slurmdbd up (pid $(<"$DBD_PIDFILE"))"
    fi
    accounting_conf="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1"
else
    accounting_conf="AccountingStorageType=accounting_storage/none"
fi

# ---------------------------------------------------------------- 4. slurm.conf (+ gres.conf)
# a node claiming more memory than slurmd measures is drained: stay a little below
mem_mb=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
mem_mb=$((mem_mb * 95 / 100))
changed=0
overrides="" gres_types="" node_gres=""
# config_overrides: slurmd trusts slurm.conf over the hardware it sees (extra CPUs, fake GPUs)
((CPUS != $(nproc) || GPUS > 0)) && overrides="SlurmdParameters=config_overrides"
if ((GPUS > 0)); then
    gres_types="GresTypes=gpu" node_gres="Gres=gpu:$GPUS"
    # a GPU gres without File= is dropped and the node becomes INVAL: give each fake GPU a
    # character device (a clone of /dev/null, major 1 minor 3)
    for ((g = 0; g < GPUS; g++)); do
        [[ -e /dev/fakegpu$g ]] || mknod -m 0666 "/dev/fakegpu$g" c 1 3
    done
    put_file "$ETC/gres.conf" 0644 <<EOF && changed=1 || true
NodeName=$NODE Name=gpu File=/dev/fakegpu[0-$((GPUS - 1))]
EOF
elif [[ -e $ETC/gres.conf ]]; then
    rm -f "$ETC/gres.conf"
    changed=1
fi
put_file "$ETC/slurm.conf" 0644 <<EOF && changed=1 || true
# written by scripts/local_slurm/start.sh: one node, no systemd, no cgroups
ClusterName=local
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# a requeued job may start again only after cred_expire seconds
AuthInfo=cred_expire=$REQUEUE_DELAY
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
$accounting_conf
JobCompType=jobcomp/none
# scheduling ticks of ~1-2 s instead of 3-60 s: requeued jobs come back quickly
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
# reject at submission what the partition can never run (else: PENDING forever)
EnforcePartLimits=ALL
MailProg=/bin/true
StateSaveLocation=$CTL_STATE
SlurmdSpoolDir=$NODE_SPOOL
SlurmctldPidFile=$CTLD_PIDFILE
SlurmdPidFile=$SLURMD_PIDFILE
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
KillWait=5
MinJobAge=300
$overrides
$gres_types
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$mem_mb $node_gres State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF

# ---------------------------------------------------------------- 5. controller and node daemons
if ((changed)); then
    # the controller goes first, so that it never hands a job to a slurmd that is going away
    halt "$CTLD_PIDFILE" slurmctld
    halt "$SLURMD_PIDFILE" slurmd
fi
if ! alive "$CTLD_PIDFILE" slurmctld; then
    rm -f "$CTLD_PIDFILE"
    if [[ ${SLURM_CLEAN:-0} == 1 ]]; then
        find "$CTL_STATE" -mindepth 1 -delete
        say "controller state wiped (SLURM_CLEAN=1)"
    fi
    /usr/sbin/slurmctld
    retry 30 scontrol ping || { tail -30 "$LOGS/slurmctld.log" >&2; die "slurmctld did not come up"; }
    say "slurmctld up (pid $(<"$CTLD_PIDFILE"))"
fi
if ! alive "$SLURMD_PIDFILE" slurmd; then
    rm -f "$SLURMD_PIDFILE"
    /usr/sbin/slurmd -N "$NODE"
    retry 10 test -s "$SLURMD_PIDFILE" || { tail -30 "$LOGS/slurmd.log" >&2; die "slurmd did not start"; }
    say "slurmd up (pid $(<"$SLURMD_PIDFILE"))"
fi

# ---------------------------------------------------------------- 6. ready to take jobs?
node_state() { sinfo -h -n "$NODE" -o %T 2>/dev/null; }
node_usable() { [[ $(node_state) =~ ^(idle|mixed|allocated|completing)$ ]]; }
if ! retry 5 node_usable; then
    # DRAIN/DOWN/INVAL is kept in the controller's saved state across restarts (e.g. after an
    # earlier bad config): put the node back into service
    say "node is '$(node_state)', resuming it"
    scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true
    retry 30 node_usable || { sinfo -R >&2; tail -20 "$LOGS/slurmd.log" >&2; die "node not usable: $(node_state)"; }
fi
if ((ACCOUNTING)); then
    # slurmctld registers the cluster with slurmdbd by itself, a moment after it starts
    retry 30 bash -c 'sacctmgr -n -P list cluster format=cluster | grep -qx local && sacct -n -X -S now' ||
        { tail -20 "$LOGS/slurmdbd.log" >&2; die "accounting (sacct) does not answer"; }
fi
sinfo -o "%P %a %D %c %G %T %N" >&2
