"""Where am I in a multi-rank training: torchrun / srun / single detection, Slurm host lists, the
validation errors, the device and backend of a rank. Every case uses an explicit environ dict."""

import dataclasses
import shutil
import subprocess
import sys

import pytest

from sfx.engine.ranks import (SLURM_PORT_BASE, SLURM_PORT_SPAN, RankInfo, check_devices, detect_ranks,
                              expand_hostlist, parse_tasks_per_node, process_group_backend, slurm_port)
from sfx.errors import ConfigError

TORCHRUN_2x4_RANK5 = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
                      "MASTER_ADDR": "node01", "MASTER_PORT": "29500", "GROUP_RANK": "1",
                      "TORCHELASTIC_RUN_ID": "none"}

# What a batch script of `sbatch --ntasks=2` sees (taken from the local cluster): SLURM_PROCID and
# SLURM_NTASKS are there, but no step variables.
SBATCH_SCRIPT = {"SLURM_JOB_ID": "152", "SLURM_JOBID": "152", "SLURM_JOB_NODELIST": "vm", "SLURM_NODELIST": "vm",
                 "SLURM_NTASKS": "2", "SLURM_NPROCS": "2", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
                 "SLURM_NODEID": "0", "SLURM_TASKS_PER_NODE": "2", "SLURM_GTIDS": "0", "SLURM_JOB_NUM_NODES": "1"}

# Task 1 of `srun --ntasks=2` inside that job (also from the local cluster).
SRUN_TASK1 = {**SBATCH_SCRIPT, "SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_GTIDS": "0,1",
              "SLURM_STEP_ID": "0", "SLURM_STEPID": "0", "SLURM_STEP_NODELIST": "vm", "SLURM_STEP_NUM_NODES": "1",
              "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_TASKS_PER_NODE": "2"}


def srun_task(**kw):
    """A task of an srun step over 3 nodes (4, 4 and 3 tasks) of job 4242."""
    env = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu[07-09]", "SLURM_STEP_NODELIST": "gpu[07-09]",
           "SLURM_NTASKS": "11", "SLURM_STEP_NUM_TASKS": "11", "SLURM_PROCID": "9", "SLURM_LOCALID": "1",
           "SLURM_NODEID": "2", "SLURM_STEP_ID": "0", "SLURM_STEP_TASKS_PER_NODE": "4(x2),3",
           "SLURM_TASKS_PER_NODE": "4(x2),3"}
    env.update({k: v for k, v in kw.items() if v is not None})
    for k in [k for k, v in kw.items() if v is None]:
        env.pop(k, None)
    return env


# --- detection ------------------------------------------------------------------------------------------

def test_no_launcher_is_a_single_rank_exactly_as_today():
    info = detect_ranks({"PATH": "/usr/bin", "HOME": "/root"})
    assert info == RankInfo(0, 1, 0, 1, None, None, "single")
    assert not info.is_distributed and info.is_main


def test_default_environ_is_os_environ(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    assert detect_ranks().launcher == "single"


def test_torchrun_variables():
    info = detect_ranks(TORCHRUN_2x4_RANK5)
    assert info == RankInfo(5, 8, 1, 4, "node01", 29500, "torchrun")
    assert info.is_distributed and not info.is_main


def test_torchrun_takes_precedence_over_slurm():
    info = detect_ranks({**SRUN_TASK1, **TORCHRUN_2x4_RANK5})
    assert info.launcher == "torchrun" and info.rank == 5 and info.world_size == 8


def test_torchrun_world_of_one_needs_no_master():
    assert detect_ranks({"RANK": "0", "WORLD_SIZE": "1"}) == RankInfo(0, 1, 0, 1, None, None, "torchrun")


def test_env_launch_without_local_variables_assumes_one_node():
    info = detect_ranks({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1234"})
    assert (info.local_rank, info.local_world_size) == (1, 2)


def test_rankinfo_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        RankInfo().rank = 3


def test_sbatch_script_without_srun_stays_single_rank():
    assert detect_ranks(SBATCH_SCRIPT) == RankInfo()


def test_srun_task_on_one_node():
    info = detect_ranks(SRUN_TASK1)
    assert info == RankInfo(1, 2, 1, 2, "vm", slurm_port(152), "slurm")


def test_srun_task_on_the_last_of_three_uneven_nodes():
    info = detect_ranks(srun_task())
    assert info == RankInfo(9, 11, 1, 3, "gpu07", slurm_port(4242), "slurm")


def test_srun_old_stepid_spelling_counts_as_a_step():
    assert detect_ranks(srun_task(SLURM_STEP_ID=None, SLURM_STEPID="3")).launcher == "slurm"


def test_srun_step_smaller_than_the_job_uses_the_step_counts():
    # `srun --ntasks=1` in a job of --ntasks-per-node=2: the job's SLURM_NTASKS_PER_NODE stays 2 (seen
    # on the local cluster), the step's variables say 1.
    env = {**SBATCH_SCRIPT, "SLURM_STEP_ID": "0", "SLURM_NTASKS": "1", "SLURM_STEP_NUM_TASKS": "1",
           "SLURM_NTASKS_PER_NODE": "2", "SLURM_STEP_TASKS_PER_NODE": "1", "SLURM_TASKS_PER_NODE": "1"}
    info = detect_ranks(env)
    assert (info.rank, info.world_size, info.local_world_size, info.is_distributed) == (0, 1, 1, False)


def test_srun_local_world_size_falls_back_through_the_variables():
    env = srun_task(SLURM_STEP_TASKS_PER_NODE=None)
    assert detect_ranks(env).local_world_size == 3
    env = srun_task(SLURM_STEP_TASKS_PER_NODE=None, SLURM_TASKS_PER_NODE=None, SLURM_NTASKS_PER_NODE="4",
                    SLURM_NODEID="0", SLURM_PROCID="1", SLURM_STEP_NUM_TASKS="8")
    assert detect_ranks(env).local_world_size == 4


def test_srun_without_step_counts_uses_the_job_counts():
    env = srun_task(SLURM_STEP_NUM_TASKS=None, SLURM_NTASKS="11")
    assert detect_ranks(env).world_size == 11


def test_srun_master_address_comes_from_the_step_then_the_job_nodelist():
    assert detect_ranks(srun_task(SLURM_STEP_NODELIST="gpu[08-09]")).master_addr == "gpu08"
    assert detect_ranks(srun_task(SLURM_STEP_NODELIST=None)).master_addr == "gpu07"
    assert detect_ranks(srun_task(MASTER_ADDR="10.0.0.5")).master_addr == "10.0.0.5"


def test_srun_master_port_is_derived_from_the_job_id_unless_set():
    assert detect_ranks(srun_task()).master_port == SLURM_PORT_BASE + 4242
    assert detect_ranks(srun_task(MASTER_PORT="31000")).master_port == 31000


def test_slurm_port_is_deterministic_and_in_its_documented_range():
    ports = {slurm_port(j) for j in range(0, 50000, 7)}
    assert min(ports) >= SLURM_PORT_BASE and max(ports) < SLURM_PORT_BASE + SLURM_PORT_SPAN
    assert slurm_port(123456) == slurm_port(123456) == 20000 + 3456
    assert max(ports) < 32768  # below Linux's ephemeral port range


def test_tasks_per_node_lists():
    assert parse_tasks_per_node("4(x2),3") == [4, 4, 3]
    assert parse_tasks_per_node("2") == [2]
    assert parse_tasks_per_node("1,2(x3)") == [1, 2, 2, 2]
    with pytest.raises(ConfigError, match=r"SLURM_TASKS_PER_NODE='4\(2\)' is not a tasks-per-node list"):
        parse_tasks_per_node("4(2)")


# --- validation -----------------------------------------------------------------------------------------

def torchrun(**kw):
    env = dict(TORCHRUN_2x4_RANK5)
    env.update({k: v for k, v in kw.items() if v is not None})
    for k in [k for k, v in kw.items() if v is None]:
        env.pop(k)
    return env


@pytest.mark.parametrize("env, message", [
    (torchrun(RANK="8"), r"rank 8 is not below the world size 8 \(WORLD_SIZE/RANK\): ranks go from 0 to"),
    (srun_task(SLURM_PROCID="11"), r"rank 11 is not below the world size 11 \(SLURM_NTASKS/SLURM_PROCID\)"),
    (torchrun(RANK="-1"), r"RANK='-1' must be an integer >= 0"),
    (torchrun(WORLD_SIZE="0"), r"WORLD_SIZE='0' must be an integer >= 1"),
    (torchrun(LOCAL_RANK="-2"), r"LOCAL_RANK='-2' must be an integer >= 0"),
    (torchrun(WORLD_SIZE="eight"), r"WORLD_SIZE='eight' is not an integer \(expected an integer >= 1\)"),
    (torchrun(RANK="1.5"), r"RANK='1.5' is not an integer"),
    (srun_task(SLURM_LOCALID="x"), r"SLURM_LOCALID='x' is not an integer"),
    (srun_task(SLURM_JOB_ID="abc"), r"SLURM_JOB_ID='abc' is not an integer"),
    (torchrun(LOCAL_RANK="4"), r"local rank 4 is not below the local world size 4 \(LOCAL_WORLD_SIZE/LOCAL_RANK\)"),
    (srun_task(SLURM_LOCALID="3"),
     r"local rank 3 is not below the local world size 3 \(tasks per node/SLURM_LOCALID\)"),
    (torchrun(LOCAL_WORLD_SIZE="9"), r"local world size 9 is larger than the world size 8"),
    (torchrun(MASTER_ADDR=None),
     r"world size 8 needs a master address but MASTER_ADDR \(torchrun sets it\) is not set"),
    (torchrun(MASTER_ADDR=""), r"world size 8 needs a master address"),
    (srun_task(SLURM_STEP_NODELIST=None, SLURM_JOB_NODELIST=None),
     r"world size 11 needs a master address but SLURM_JOB_NODELIST \(or MASTER_ADDR\) is not set"),
    (torchrun(MASTER_PORT=None), r"MASTER_PORT is not set but WORLD_SIZE=8"),
    (torchrun(MASTER_PORT="70000"), r"MASTER_PORT='70000' is not a port number \(expected an integer 1..65535\)"),
    (srun_task(MASTER_PORT="http"), r"MASTER_PORT='http' is not a port number"),
    (srun_task(SLURM_JOB_ID=None), r"neither MASTER_PORT nor SLURM_JOB_ID is set but SLURM_STEP_NUM_TASKS=11"),
    (torchrun(RANK=None), r"RANK is not set but RANK or WORLD_SIZE is"),
    (torchrun(WORLD_SIZE=None), r"WORLD_SIZE is not set but RANK or WORLD_SIZE is"),
    (srun_task(SLURM_STEP_NUM_TASKS=None, SLURM_NTASKS=None), r"SLURM_NTASKS is not set but SLURM_PROCID and"),
    (srun_task(SLURM_LOCALID=None), r"SLURM_LOCALID is not set"),
    (srun_task(SLURM_NODEID=None), r"SLURM_STEP_TASKS_PER_NODE='4\(x2\),3' differs between nodes but SLURM_NODEID"),
    (srun_task(SLURM_NODEID="3"), r"SLURM_NODEID=3 is beyond the 3 nodes of SLURM_STEP_TASKS_PER_NODE"),
    (srun_task(SLURM_STEP_NODELIST="gpu[09-07]"), r"host list 'gpu\[09-07\]' has a descending range '09-07'"),
])
def test_bad_launcher_values_are_one_clear_config_error(env, message):
    with pytest.raises(ConfigError, match=message) as e:
        detect_ranks(env)
    assert "\n" not in str(e.value)


# --- host lists -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, hosts", [
    ("vm", ["vm"]),
    ("node[01-03]", ["node01", "node02", "node03"]),
    ("node[1,3,5-6]", ["node1", "node3", "node5", "node6"]),
    ("a[1-2],b3", ["a1", "a2", "b3"]),
    ("rack[1-2]-node[01-02]", ["rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"]),
    ("n[8-11]", ["n8", "n9", "n10", "n11"]),           # padding follows the first number, as in Slurm
    ("n[009-011]", ["n009", "n010", "n011"]),
    ("x[1-2]y[3-4]z", ["x1y3z", "x1y4z", "x2y3z", "x2y4z"]),
    (",a,,b", ["a", "b"]),                              # empty items skipped, as scontrol does
    ("a,a", ["a", "a"]),                                # duplicates kept, as scontrol does
    ("", []),
])
def test_expand_hostlist(spec, hosts):
    assert expand_hostlist(spec) == hosts


@pytest.mark.parametrize("spec, message", [
    ("n[1-2", r"host list 'n\[1-2' has a '\[' without its '\]'"),
    ("n]", r"host list 'n\]' has a '\]' without its '\['"),
    ("n[[1]]", r"has nested brackets"),
    ("n[]", r"host list 'n\[\]' has a bad range ''"),
    ("n[a-b]", r"host list 'n\[a-b\]' has a bad range 'a-b' \(expected numbers like"),
    ("n[3-1]", r"has a descending range '3-1' \(expected low-high\)"),
])
def test_bad_hostlists_are_config_errors(spec, message):
    with pytest.raises(ConfigError, match=message):
        expand_hostlist(spec)


SCONTROL_SPECS = ["node[01-03],b[1,3]", "rack[1-2]-node[01-02]", "n[8-11],x[1-2]y[3-4]", "a,a,,b"]


@pytest.mark.parametrize("spec", SCONTROL_SPECS)
def test_expand_hostlist_matches_scontrol(spec):
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        pytest.skip("scontrol is not installed: no Slurm to compare the host list expansion with")
    out = subprocess.run([scontrol, "show", "hostnames", spec], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        pytest.skip(f"scontrol show hostnames failed here: {out.stderr.strip()[:200]}")
    assert expand_hostlist(spec) == out.stdout.split()


# --- devices and backend --------------------------------------------------------------------------------

def test_gpu_rank_gets_its_local_gpu():
    info = detect_ranks(TORCHRUN_2x4_RANK5)
    assert check_devices(info, "gpu", cuda_device_count=4) == "cuda:1"
    assert check_devices(info, "gpu", cuda_device_count=8) == "cuda:1"


def test_more_ranks_than_gpus_on_a_node_names_both_numbers():
    info = detect_ranks(TORCHRUN_2x4_RANK5)
    with pytest.raises(ConfigError, match=r"4 ranks on this node but only 2 GPU\(s\) visible: one GPU per rank"):
        check_devices(info, "gpu", cuda_device_count=2)


def test_cpu_device_or_no_cuda_means_cpu():
    info = detect_ranks(TORCHRUN_2x4_RANK5)
    assert check_devices(info, "cpu", cuda_device_count=2) == "cpu"    # no GPU-count check on the CPU
    assert check_devices(info, "gpu", cuda_device_count=0) == "cpu"    # the single-rank fallback
    assert check_devices(RankInfo(), "gpu", cuda_device_count=1) == "cuda:0"


def test_unknown_device_is_a_config_error():
    with pytest.raises(ConfigError, match=r"--device='tpu' is not a device \(expected gpu or cpu\)"):
        check_devices(RankInfo(), "tpu", 1)


def test_process_group_backend():
    assert process_group_backend("cpu") == "gloo"
    assert process_group_backend("cuda:3") == "nccl"
    assert process_group_backend("cuda") == "nccl"
    with pytest.raises(ConfigError, match=r"device 'mps' has no process-group backend \(expected cpu or cuda"):
        process_group_backend("mps")


def test_module_itself_does_not_import_torch():
    # sfx.engine's package __init__ imports the coordinator (torch); ranks.py alone must not, so a
    # launcher-side tool can load it cheaply. Load the file on its own to check.
    import sfx.engine.ranks as ranks
    code = ("import importlib.util, sys; "
            f"spec = importlib.util.spec_from_file_location('ranks_alone', {ranks.__file__!r}); "
            "m = sys.modules['ranks_alone'] = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
            "print(m.detect_ranks({}).launcher, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "single False"


def test_a_rank_bound_to_its_own_gpu_by_the_launcher_uses_it():
    """srun --gpus-per-task=1: every task sees one GPU (CUDA_VISIBLE_DEVICES=<its own>) whatever its local
    rank; without such a binding one GPU for four ranks is refused."""
    info = detect_ranks(TORCHRUN_2x4_RANK5)
    assert check_devices(info, "gpu", cuda_device_count=1, environ={"CUDA_VISIBLE_DEVICES": "3"}) == "cuda:0"
    with pytest.raises(ConfigError, match=r"4 ranks on this node but only 1 GPU\(s\) visible"):
        check_devices(info, "gpu", cuda_device_count=1, environ={})


def test_each_rank_s_components_get_the_rank_s_device():
    from sfx.registries import default_cfg
    from sfx.engine.wiring import rank_device

    info = detect_ranks(TORCHRUN_2x4_RANK5)
    assert rank_device(default_cfg(device="cpu"), info) == "cpu"
    assert rank_device(default_cfg(device="cpu"), None) == "cpu"
