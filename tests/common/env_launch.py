"""Starts the ranks of a launch without MPI (issue 36) as plain processes,
as torchrun or srun would: each rank gets RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT and TRAINYARD_JOB_TOKEN in its environment.
Standard library only; shared by tests/apps/test_env_launch_cli.py and the
namespace-host tests (a per-host command prefix, e.g. ["ip", "netns",
"exec", "h2"], goes before a rank's argv)."""
import os
import signal
import socket
import subprocess
import time

TOKEN = "trainyard-test-token-0123456789"


def free_port(host="127.0.0.1"):
    """A TCP port nobody listens on now (the OS's pick, released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def rank_env(rank, world, addr, port, token=TOKEN, local_rank=None, base=None, extra=None):
    """The environment of rank `rank` of `world` (torchrun's variables)."""
    env = dict(os.environ if base is None else base)
    for name in ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"):
        env.pop(name, None)  # an MPI launcher's variables would pick MPI
    env.update({"RANK": str(rank), "WORLD_SIZE": str(world),
                "LOCAL_RANK": str(rank if local_rank is None else local_rank),
                "MASTER_ADDR": addr, "MASTER_PORT": str(port)})
    if token is not None:
        env["TRAINYARD_JOB_TOKEN"] = token
    env.update(extra or {})
    return {k: v for k, v in env.items() if v is not None}


class Rank:
    """One started rank: its process and, once collected, its output."""

    def __init__(self, rank, proc):
        self.rank, self.proc = rank, proc
        self.returncode, self.stdout, self.stderr, self.seconds = None, "", "", None


def spawn(argvs, envs, prefixes=None):
    """Starts one process per (argv, env); prefixes[i] (a list, or None) goes
    before argv i. Returns [Rank]."""
    ranks = []
    started = time.monotonic()
    for i, (argv, env) in enumerate(zip(argvs, envs)):
        prefix = list(prefixes[i]) if prefixes and prefixes[i] else []
        proc = subprocess.Popen(prefix + list(argv), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env,
                                start_new_session=True)
        r = Rank(i, proc)
        r.started = started
        ranks.append(r)
    return ranks


def collect(ranks, timeout):
    """Waits for every rank (all by `timeout` seconds from now); a rank still
    running then is killed (its group) and gets returncode None. Each
    rank's seconds: from the start of all to its exit."""
    deadline = time.monotonic() + timeout
    for r in ranks:
        left = max(0.1, deadline - time.monotonic())
        try:
            r.stdout, r.stderr = r.proc.communicate(timeout=left)
            r.returncode = r.proc.returncode
        except subprocess.TimeoutExpired:
            kill(r)
            r.stdout, r.stderr = r.proc.communicate()
            r.returncode = None
        r.seconds = time.monotonic() - r.started
    return ranks


def kill(r, sig=signal.SIGKILL):
    try:
        os.killpg(r.proc.pid, sig)
    except OSError:
        pass


def launch(argv, world, addr="127.0.0.1", port=None, timeout=300, per_rank=None,
           prefixes=None, env=None):
    """Runs `argv` as `world` ranks meeting at addr:port and returns their
    [Rank] when all ended (or were killed at `timeout`). port None: a free
    port of this process's network (pass one when addr lives in another
    network namespace). per_rank(rank) -> dict of variables to set (None:
    unset) on that rank, over rank_env's; prefixes[rank]: a list put before
    that rank's argv (e.g. ["ip", "netns", "exec", "h2"]). Leftovers are
    killed in any case."""
    port = port or free_port(addr)
    envs = []
    for r in range(world):
        e = rank_env(r, world, addr, port, base=env)
        for k, v in (per_rank(r) if per_rank else {}).items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
        envs.append(e)
    ranks = spawn([argv] * world, envs, prefixes)
    try:
        return collect(ranks, timeout)
    finally:
        for r in ranks:
            if r.proc.poll() is None:
                kill(r)
                r.proc.wait()
