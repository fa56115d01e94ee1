"""One training on two "hosts": two Linux network namespaces joined by a veth pair play two nodes, rank 0
in one, rank 1 in the other, and they meet over the veth address only (nothing else links the two
namespaces; no address outside this machine is ever used).

Each node runs what a user types on a real node (node 0's address HOST, any free port there; the same
command on both nodes but for ``--node_rank``; the experiment folder on a filesystem both nodes see)::

    torchrun --nnodes=2 --node_rank=0 --nproc_per_node=1 \\
        --rdzv_endpoint=HOST:29500 -m sfx.train --env=gym_CartPole-v1 --experiment=two_hosts ...
    torchrun --nnodes=2 --node_rank=1 --nproc_per_node=1 \\
        --rdzv_endpoint=HOST:29500 -m sfx.train --env=gym_CartPole-v1 --experiment=two_hosts ...

(torchrun's default ``static`` rendezvous: node 0's torchrun serves the store at HOST:29500.)
No ``GLOO_SOCKET_IFNAME``: gloo would take the address the host name resolves to (127.0.0.1 on this
machine), rank 1 would be told to reach rank 0 at 127.0.0.1 and could not ("Gloo connectFullMesh failed
... Connection refused, remote=[127.0.0.1]"); sfx's learners see that the host name resolves to loopback
while rank 0 is elsewhere and pick the interface that reaches rank 0 themselves (``sfx0``: the veth end,
the same name in both namespaces, as ``eth0`` would be on two nodes). The test checks they said so.

Both namespaces share this machine's filesystem and /dev/shm, as two nodes share a network filesystem:
both ranks get the same ``--train_dir`` and ``--experiment``.

Skips with the reason where it cannot run: not root, no ``ip`` (iproute2), or namespaces / veth pairs
not allowed (a container without CAP_SYS_ADMIN / CAP_NET_ADMIN).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]

# A /30 from the private 10/8 range with an unlikely third octet. The addresses live only inside the two
# new namespaces (each has its own routing table with no default route), so they can clash with nothing
# on the machine or beyond it.
ADDR_A, ADDR_B, PREFIX = "10.213.77.1", "10.213.77.2", 30
VETH = "sfx0"  # both ends: the same interface name on every "node"
PORT = 29500  # torchrun's default port; free in a fresh namespace
NS_RE = re.compile(r"^sfx-(\d+)-[ab]$")
# the torchrun of this interpreter's environment (the venv's), as a user would type it
_TORCHRUN_BIN = Path(sys.executable).parent / "torchrun"
TORCHRUN = [str(_TORCHRUN_BIN)] if _TORCHRUN_BIN.exists() else [sys.executable, "-m", "torch.distributed.run"]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc


def _namespaces() -> set[str]:
    out = _ip("netns", "list", check=False).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _remove_stale_namespaces() -> None:
    """Namespaces of an earlier run of this test whose pytest was killed before its cleanup (its pid is gone)."""
    for name in _namespaces():
        m = NS_RE.match(name)
        if m and not psutil.pid_exists(int(m.group(1))):
            _ip("netns", "del", name, check=False)


def _counters(ns: str) -> dict[str, int]:
    """The veth end's byte counters as seen inside namespace ``ns``."""
    out = subprocess.run(["ip", "netns", "exec", ns, "cat", f"/sys/class/net/{VETH}/statistics/rx_bytes",
                          f"/sys/class/net/{VETH}/statistics/tx_bytes"],
                         capture_output=True, text=True, timeout=30, check=True).stdout.split()
    return {"rx": int(out[0]), "tx": int(out[1])}


_LISTEN = ("import socket,sys; s=socket.create_server((sys.argv[1], 0)); s.settimeout(20); "
           "print(s.getsockname()[1], flush=True); c, _ = s.accept(); c.sendall(b'sfx-veth-ok')")
_CONNECT = ("import socket,sys; c=socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10); "
            "print(c.recv(64).decode())")


@dataclass
class TwoHosts:
    """Namespaces ``a`` (address ``addr_a``: rank 0, the rendezvous) and ``b`` (``addr_b``: rank 1)."""

    a: str
    b: str
    addr_a: str = ADDR_A
    addr_b: str = ADDR_B
    procs: list[subprocess.Popen] = field(default_factory=list)

    def popen(self, ns: str, cmd: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen:
        """``cmd`` inside namespace ``ns`` in its own process group (killed at teardown if still alive)."""
        with open(log_path, "w") as log_file:
            proc = subprocess.Popen(["ip", "netns", "exec", ns, *cmd], cwd=REPO, env=env, stdout=log_file,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def check_connected(self) -> None:
        """A TCP exchange from a to b over the veth (no ping on every machine)."""
        server = subprocess.Popen(["ip", "netns", "exec", self.b, sys.executable, "-c", _LISTEN, self.addr_b],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(server)
        port = server.stdout.readline().strip()
        if not port.isdigit():
            raise RuntimeError(f"no listener in {self.b}: {server.communicate(timeout=10)[1].strip()}")
        got = subprocess.run(["ip", "netns", "exec", self.a, sys.executable, "-c", _CONNECT, self.addr_b, port],
                             capture_output=True, text=True, timeout=30)
        server.wait(timeout=10)
        if got.stdout.strip() != "sfx-veth-ok":
            raise RuntimeError(f"{self.a} -> {self.addr_b}:{port} over the veth failed: "
                               f"{(got.stderr or got.stdout).strip()[-500:]}")

    def kill_all(self) -> None:
        """Every process started here and its descendants: SIGTERM (torchrun stops its workers), then SIGKILL."""
        tree: list[psutil.Process] = []
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    tree += [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
                except psutil.NoSuchProcess:
                    pass
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except (ProcessLookupError, PermissionError):
                    pass
        _, alive = psutil.wait_procs(tree, timeout=15)
        for p in alive:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=10)
        for proc in self.procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


@pytest.fixture
def two_hosts():
    """Two namespaces joined by a veth pair, lo and the veth ends up, connectivity checked. Always torn
    down: first every process started in them, then both namespaces (which takes their veth ends along)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("network namespaces are Linux only")
    if os.geteuid() != 0:
        pytest.skip("needs root to create network namespaces (ip netns add)")
    if shutil.which("ip") is None:
        pytest.skip("needs the ip command (iproute2)")
    _remove_stale_namespaces()
    hosts = TwoHosts(a=f"sfx-{os.getpid()}-a", b=f"sfx-{os.getpid()}-b")
    made: list[str] = []
    try:
        for ns in (hosts.a, hosts.b):
            added = _ip("netns", "add", ns, check=False)
            if added.returncode != 0:
                pytest.skip(f"cannot create a network namespace here (ip netns add: {added.stderr.strip()})")
            made.append(ns)
        try:
            # created straight inside the namespaces: nothing ever appears in this machine's own namespace
            _ip("link", "add", VETH, "netns", hosts.a, "type", "veth", "peer", "name", VETH, "netns", hosts.b)
            for ns, addr in ((hosts.a, hosts.addr_a), (hosts.b, hosts.addr_b)):
                _ip("-n", ns, "addr", "add", f"{addr}/{PREFIX}", "dev", VETH)
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "link", "set", VETH, "up")
        except RuntimeError as e:
            pytest.skip(f"cannot join two network namespaces by a veth pair here: {e}")
        try:
            hosts.check_connected()
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            pytest.skip(f"the veth pair between two network namespaces carries no traffic here: {e}")
        yield hosts
    finally:
        hosts.kill_all()
        for ns in made:
            _ip("netns", "del", ns, check=False)
        left = _namespaces() & set(made)
        assert not left, f"network namespaces left behind: {sorted(left)}"


@pytest.mark.slow
def test_two_hosts_train_one_cartpole_over_a_veth_pair(two_hosts, tmp_path):
    """Rank 0 in namespace a, rank 1 in namespace b, each through its own torchrun (static rendezvous at
    a's veth address, see the module docstring): both finish, rank 0 alone checkpoints, the env steps
    are both ranks', the weights are equal at the end, and the gradients went over the veth."""
    flags = ["--env=gym_CartPole-v1", "--experiment=two_hosts", f"--train_dir={tmp_path}", "--num_workers=1",
             "--num_envs_per_worker=8", "--batch_size=512", "--ppo_epochs=1", "--num_batches_per_iteration=1",
             "--use_rnn=False", "--hidden_size=64", "--device=cpu", "--seed=0", "--train_for_env_steps=40000",
             "--train_for_seconds=90", "--distributed_timeout_sec=30"]
    env = {k: v for k, v in os.environ.items() if k not in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")}
    before = _counters(two_hosts.a)
    procs = []
    for node_rank, ns in enumerate((two_hosts.a, two_hosts.b)):
        cmd = [*TORCHRUN, "--nnodes=2", f"--node_rank={node_rank}", "--nproc_per_node=1",
               f"--rdzv_endpoint={two_hosts.addr_a}:{PORT}", "-m", "sfx.train", *flags]
        procs.append(two_hosts.popen(ns, cmd, env, tmp_path / f"node{node_rank}.out"))

    def outputs() -> str:
        return "\n".join(f"--- node {k} (last lines) ---\n" + "\n".join(
            (tmp_path / f"node{k}.out").read_text(errors="replace").splitlines()[-40:]) for k in range(2))

    deadline = time.time() + 180
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=max(1.0, deadline - time.time())))
        except subprocess.TimeoutExpired:
            pytest.fail(f"the two nodes did not finish within 180 s\n{outputs()}")
    assert codes == [0, 0], outputs()
    after = _counters(two_hosts.a)

    exp = tmp_path / "two_hosts"
    logs = [(exp / "sf_log.txt").read_text(), (exp / "rank_1" / "sf_log.txt").read_text()]
    # each rank knows its place and met the other at namespace a's veth address; its learner chose the veth
    for rank, text in enumerate(logs):
        assert re.search(rf"rank {rank} of 2 \(.*rendezvous {re.escape(two_hosts.addr_a)}:\d+\)", text), text[:2000]
        assert f"gloo meets the other ranks on {VETH} (GLOO_SOCKET_IFNAME={VETH}" in text, text[-3000:]

    # both ranks stopped together at one total with equal weights; rank 0 alone wrote the checkpoint
    totals = []
    for text in logs:
        agreed = re.findall(r"every rank's learner agreed to stop at ([\d,]+) env steps \(all ranks\) with equal "
                            r"weights", text)
        assert agreed, text[-2000:]
        totals.append(int(agreed[-1].replace(",", "")))
    assert totals[0] == totals[1] >= 40000
    ckpts = sorted((exp / "checkpoint_p0").glob("checkpoint_*.pth"))
    assert len(ckpts) == 1 and ckpts[0].name.endswith(f"_{totals[0]}.pth"), ckpts
    assert not list((exp / "rank_1").rglob("*.pth"))
    assert (exp / "done").read_text().strip() == f"env_steps={totals[0]}"

    # the env steps are both ranks': every iteration (one minibatch of --batch_size per rank) adds 2 x 512
    import torch

    ckpt = torch.load(ckpts[0], map_location="cpu", weights_only=False)
    assert ckpt["env_steps"] == totals[0] == ckpt["train_step"] * 512 * 2, (ckpt["env_steps"], ckpt["train_step"])

    # the gradients crossed the veth: any all-reduce of N bytes between two ranks makes each receive and
    # send at least N; half that per step is the bar (the counters also carry the store, the votes, etc.)
    n_params = sum(s["exp_avg"].numel() for s in ckpt["optimizer"]["state"].values())
    least = ckpt["train_step"] * n_params * 4 // 2
    seen = {k: after[k] - before[k] for k in after}
    print(f"veth {VETH} in {two_hosts.a}: {seen} bytes for {ckpt['train_step']} steps of {n_params} parameters")
    assert seen["rx"] >= least and seen["tx"] >= least, (seen, least)
