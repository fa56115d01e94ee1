"""Where the ranks of one training meet: torch.distributed's key-value store (``TCPStore``) at rank 0's
address, opened by each rank's coordinator before any worker starts.

The meeting checks, one clear :class:`~sfx.errors.ConfigError` line per rank when it fails:

- the rendezvous can be reached (or, on rank 0, its port can be listened on) within
  ``--distributed_timeout_sec``;
- every rank came (a rank that never arrives is named);
- every rank runs with rank 0's flags (all but each rank's own folder and seed) and the same world size.

Who hosts the store: torchrun's agent already serves one at ``MASTER_ADDR:MASTER_PORT``
(``TORCHELASTIC_USE_AGENT_STORE=True``): every rank is a client. Under srun (or any launcher without an
agent) rank 0's coordinator hosts it for the whole training. The learners later form their process
group through the same store (:func:`connect_store`, keys under their own prefix), so a training needs
one port only, the one the launcher gave.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
from typing import Any, Mapping

from sfx.errors import ConfigError

log = logging.getLogger(__name__)

# cfg fields that differ between ranks by design (rank_cfg): everything else must be rank 0's
RANK_OWN_FIELDS = ("train_dir", "experiment", "seed", "command_line", "explicit_args")
SHOWN_DIFFERENCES = 5


def agent_hosts_store(environ: Mapping[str, str] | None = None) -> bool:
    """Whether a torchrun agent serves the store at MASTER_ADDR:MASTER_PORT (then nobody else may)."""
    env = os.environ if environ is None else environ
    return env.get("TORCHELASTIC_USE_AGENT_STORE", "").strip().lower() == "true"


def key_prefix(environ: Mapping[str, str] | None = None) -> str:
    """The prefix of every key of this attempt: torchrun restarts a failed group with the same agent
    store, so its restart count keeps an earlier attempt's keys apart."""
    env = os.environ if environ is None else environ
    return f"sfx/attempt_{env.get('TORCHELASTIC_RESTART_COUNT', '0').strip() or '0'}"


def open_store(ranks: Any, timeout_sec: float, host: bool) -> Any:
    """A ``TCPStore`` at ``ranks.master_addr:ranks.master_port``: served here when ``host``, else a client
    that keeps trying to connect for ``timeout_sec``. A ConfigError names the address when neither works."""
    from torch.distributed import DistError, TCPStore

    where = f"{ranks.master_addr}:{ranks.master_port}"
    try:
        return TCPStore(ranks.master_addr, int(ranks.master_port), None, host,
                        timeout=datetime.timedelta(seconds=timeout_sec), wait_for_workers=False)
    except (DistError, RuntimeError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        if host:
            raise ConfigError(f"rank 0 cannot serve the rendezvous on port {ranks.master_port} ({first}): another "
                              f"program holds it? Set MASTER_PORT to a free port") from None
        raise ConfigError(f"rank {ranks.rank} could not reach the rendezvous at {where} within {timeout_sec:.0f} s "
                          f"(--distributed_timeout_sec): is rank 0 running, and are MASTER_ADDR / MASTER_PORT (or "
                          f"the node list) right? ({first})") from None


def connect_store(ranks: Any, timeout_sec: float, name: str) -> Any:
    """A client of the training's store (served by the agent or rank 0's coordinator) whose keys live under
    ``<attempt>/<name>``; the learners pass it to ``init_process_group``."""
    from torch.distributed import PrefixStore

    return PrefixStore(f"{key_prefix()}/{name}", open_store(ranks, timeout_sec, host=False))


def _is_loopback(address: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def gloo_interface(master_addr: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The network interface gloo should use on this host to meet ranks on other hosts, or None to leave
    gloo's own choice alone.

    Gloo takes the address this host's name resolves to; many machines (Debian's ``127.0.1.1 <hostname>``
    in /etc/hosts, containers) resolve it to a loopback address, which the other hosts cannot reach, and
    the learners fail to connect. So when ``GLOO_SOCKET_IFNAME`` is not set, the host name resolves only to
    loopback addresses and rank 0's address is not a loopback one (the ranks may be on several hosts),
    this is the interface that holds the local address this host uses to reach ``master_addr``."""
    import socket

    import psutil

    env = os.environ if environ is None else environ
    if env.get("GLOO_SOCKET_IFNAME", "").strip():
        return None
    try:
        master = socket.getaddrinfo(master_addr, None, proto=socket.IPPROTO_TCP)[0]
        if _is_loopback(master[4][0]):
            return None  # every rank on this host: loopback is right
        own = {info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, proto=socket.IPPROTO_TCP)}
    except OSError:
        return None
    if own and not all(_is_loopback(a) for a in own):
        return None  # the host name resolves to a network address: gloo's default works
    try:
        with socket.socket(master[0], socket.SOCK_DGRAM) as probe:  # no packet is sent: only a route lookup
            probe.connect((master[4][0], 9))
            local = probe.getsockname()[0]
    except OSError:
        return None
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address.split("%", 1)[0] == local for a in addrs):
            return name
    return None


def comparable_flags(cfg: Any) -> dict:
    """The flags every rank must share, as JSON values (what the store carries)."""
    flags = {k: v for k, v in sorted(vars(cfg).items()) if k not in RANK_OWN_FIELDS}
    return json.loads(json.dumps(flags, default=repr))


def flag_differences(mine: dict, theirs: dict) -> list[str]:
    """``--name=mine (rank 0: theirs)`` for each flag that differs, sorted by name."""
    return [f"--{k}={mine.get(k)!r} (rank 0: {theirs.get(k)!r})"
            for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)]


class RankMeeting:
    """The store of a training that met (keep it for the whole run: when rank 0 hosts it, the learners'
    process group lives on it). :meth:`exchange` and :meth:`agree` are barriers that carry values and
    errors; ``close()`` lets the store go."""

    def __init__(self, store: Any, kv: Any, ranks: Any, timeout_sec: float, hosted: bool) -> None:
        self.store = store
        self.kv = kv
        self.ranks = ranks
        self.timeout_sec = timeout_sec
        self.hosted = hosted

    def exchange(self, step: str, value: str, what: str) -> list[str]:
        """Every rank posts ``value`` for ``step`` and gets every rank's, in rank order. A rank that does
        not post within the timeout is named (``what``: the step in words)."""
        r, n = self.ranks.rank, self.ranks.world_size
        keys = [f"{step}/rank_{q}" for q in range(n)]
        try:
            self.kv.set(keys[r], value)
            try:
                self.kv.wait(keys, datetime.timedelta(seconds=self.timeout_sec))
            except Exception:  # noqa: BLE001 - a timeout (DistStoreError) or rank 0's store gone
                missing = [str(q) for q, k in enumerate(keys) if not self.kv.check([k])]
                raise ConfigError(f"rank(s) {', '.join(missing)} of {n} did not come to the {what} within "
                                  f"{self.timeout_sec:.0f} s (--distributed_timeout_sec): start every rank "
                                  f"(torchrun --nproc_per_node / --nnodes, srun --ntasks) with the same command") from None
            values = [self.kv.get(k).decode() for k in keys]
            self.kv.set(f"{step}/read_{r}", "")
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001 - the store went away: rank 0 ended
            raise ConfigError(f"rank {r} lost the rendezvous at {self.ranks.master_addr}:{self.ranks.master_port} "
                              f"during the {what} (rank 0 ended? {str(e).splitlines()[0][:120] if str(e) else ''})") from None
        return values

    def fail(self, step: str, message: str) -> None:
        """Raise ``message`` as a ConfigError; rank 0, when it serves the store, first gives the other ranks
        a few seconds to read ``step`` (its store ends with it)."""
        if self.hosted:
            keys = [f"{step}/read_{q}" for q in range(1, self.ranks.world_size)]
            try:
                self.kv.wait(keys, datetime.timedelta(seconds=LINGER_SEC))
            except Exception:  # noqa: BLE001 - they may be gone already
                pass
        raise ConfigError(message)

    def agree(self, step: str, error: str | None = None) -> None:
        """Every rank says whether it passed ``step`` (``error``: why not) and waits for the others: when
        any rank failed, every rank raises a ConfigError, its own error or which rank failed and why. So a
        rank whose env or checkpoint check fails ends the others at once, not after a timeout."""
        results = self.exchange(step, error or "", f"start-up checks ({step})")
        if error:
            self.fail(step, error)
        failed = [(q, e) for q, e in enumerate(results) if e]
        if failed:
            self.fail(step, "; ".join(f"rank {q} could not start: {e}" for q, e in failed))

    def close(self) -> None:
        self.store = self.kv = None


# how long rank 0 keeps its store up after a failed meeting, for the other ranks to read why
LINGER_SEC = 10.0


def meet_ranks(cfg: Any, ranks: Any, timeout_sec: float | None = None,
               environ: Mapping[str, str] | None = None) -> RankMeeting:
    """Every rank's coordinator calls this before starting any worker (``ranks``:
    :class:`~sfx.engine.ranks.RankInfo`); see the module docstring. Returns the :class:`RankMeeting`, or
    raises :class:`ConfigError` on every rank when a rank's flags or world size differ from rank 0's or a
    rank does not come."""
    from torch.distributed import PrefixStore

    timeout = float(cfg.distributed_timeout_sec if timeout_sec is None else timeout_sec)
    host = ranks.is_main and not agent_hosts_store(environ)
    store = open_store(ranks, timeout, host)
    meeting = RankMeeting(store, PrefixStore(f"{key_prefix(environ)}/meeting", store), ranks, timeout, host)
    mine = json.dumps({"world_size": ranks.world_size, "flags": comparable_flags(cfg)})
    everyone = [json.loads(v) for v in meeting.exchange("flags", mine, "rendezvous")]
    problems = _differences(everyone, ranks.rank)
    if problems:
        meeting.fail("flags", problems)
    log.info("the %d ranks met at %s:%s (%s) with the same flags", ranks.world_size, ranks.master_addr,
             ranks.master_port, "store served by rank 0" if host else "torchrun's store")
    return meeting


def _differences(everyone: list[dict], me: int) -> str:
    """'' when every rank has rank 0's world size and flags; else the error this rank prints: its own
    differences first (named flag by flag), then which other ranks differ."""
    rank0 = everyone[0]

    def problem(r: int) -> str:
        theirs = everyone[r]
        if theirs["world_size"] != rank0["world_size"]:
            return f"rank {r} counts {theirs['world_size']} ranks but rank 0 counts {rank0['world_size']}"
        differ = flag_differences(theirs["flags"], rank0["flags"])
        return f"rank {r} was started with other flags than rank 0: {_shown(differ)}" if differ else ""

    bad = [r for r in range(1, len(everyone)) if problem(r)]
    if not bad:
        return ""
    if me == 0:  # rank 0 names every rank that differs, and how
        message = "; ".join(problem(r) for r in bad)
    elif me in bad:  # a rank names its own differences
        message = problem(me)
    else:
        message = f"rank(s) {', '.join(map(str, bad))} were started with other flags or world size than rank 0"
    return message + ": start every rank with the same command line"


def _shown(differ: list[str]) -> str:
    more = len(differ) - SHOWN_DIFFERENCES
    return ", ".join(differ[:SHOWN_DIFFERENCES]) + (f" and {more} more" if more > 0 else "")
