#!/usr/bin/env python3
"""`trainyard train` across hosts (issue 36): two network-namespace hosts on
this machine (netns_hosts.py: h1 10.88.0.1, h2 10.88.0.2, a bridge between
them), ranks started on them by a launcher, the cpu backend with one thread
per rank, the tiny GPT-2 fixture, 10 steps, global batch 4. Python standard
library only; root only.

- MpirunMatchTest (Open MPI's `mpirun --hostfile` from h1, an rsh agent
  that enters the named host's namespace, TCP restricted to 10.88.0.0/24):
  every rank says on stderr which host it runs on, and
  - data parallel, one rank per host, equals one process with
    --grad-accum 2: per-step loss within 1e-6 relative, final weights
    within 1e-6;
  - --zero 1 on the same layout: the same;
  - --tp 2 and --pp 2, one rank per host: losses within 1e-6 relative,
    weights within 1e-6 (the key third of GPT-2's c_attn.bias left out: its
    gradient is zero in exact arithmetic, pure rounding that AdamW scales
    up to lr-sized steps; test_tensor_parallel_cli.py says more);
  - 4 ranks, 2 per host (--tp 2 inside each host, dp 2 across them): the
    same.
- MpirunFaultTest (2 ranks, one per host, --save-every 2, steps slowed by
  TRAINYARD_DEBUG_STEP_SLEEP_MS, --dist-timeout 5):
  - a host dies mid-run (every process on h2 SIGKILLed): mpirun ends
    non-zero within --dist-timeout + 10 s, Open MPI names the host it lost
    ("ORTE has lost communication with a remote daemon ... on node
    10.88.0.2", h2's address, as the host file names it; it
    names the daemon, not the rank: the rank lines say rank 1 ran there;
    the rsh agent reports the death 2 s late as ssh would, else mpirun
    says a daemon was "unable to reliably start" and names no host);
  - h2's link goes down (its processes live on, cut off): rank 0 on h1
    ends within --dist-timeout + 10 s naming rank 1 ("rank 1 on host h2 did not reach
    ..." or, when the link went down while a collective's data moved, "...
    stopped answering during ...", then "within 5 s (--dist-timeout)") and calls MPI_Abort. Open MPI's
    mpirun itself does not end then: it waits for h2's daemon, which it can
    neither reach nor give up on (seen: still running 25 s after the link
    went down; once the link came back it ended, rc 1, about 10 s later, with
    TCP's retransmission back-off). So the test times the surviving rank,
    not mpirun, and ends mpirun itself;
  - after each, the last checkpoint is whole and `--resume latest` on h1
    alone (1 rank, --grad-accum 2: the same global batch) continues it:
    its losses equal the uninterrupted one-process run's within 1e-6 and
    so do its final weights.

The launcher is a parameter of the cases (MatchCases, FaultCases): a class
that starts ranks on given hosts and finds a rank's process; a second
launcher runs the same cases by subclassing them. Without root, `ip`,
`unshare`, network namespaces, mpirun or the MPI shim every test is
skipped (exit 77) and says why.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "apps"))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
import env_launch  # noqa: E402
import netns_hosts  # noqa: E402
import test_distributed_cli as dist  # noqa: E402
import unittest_exit  # noqa: E402

STEPS = 10
REL = 1e-6
DIST_TIMEOUT = 5
STEP_SLEEP_MS = "500"  # the faults come between steps 2 and 10, never after the run
# Every rank of these tests: rows 2 x accumulation 2 in one process equal
# 2 replicas x rows 2, and tp/pp ranks read the same rows as one process.
ONE = ["--batch-size", "2", "--grad-accum", "2"]


# On a GPU machine (tests/cuda/device_run.sh multihost):
# TRAINYARD_MULTIHOST_BACKEND=cuda runs every rank and the reference on that
# backend, and TRAINYARD_MULTIHOST_GPUS=N gives host hK the K-th share of the
# machine's N GPUs (CUDA_VISIBLE_DEVICES; one GPU: both hosts use it, as two
# processes). Each host has its own hostname, so NCCL sees two hosts and
# connects them through its network transport over the veth (set
# NCCL_SOCKET_IFNAME=eth0), not shared memory or NVLink.
MH_BACKEND = os.environ.get("TRAINYARD_MULTIHOST_BACKEND")
MH_GPUS = int(os.environ.get("TRAINYARD_MULTIHOST_GPUS", "0"))


def gpus_per_host():
    return max(1, MH_GPUS // 2) if MH_GPUS else 0


def host_prelude():
    """Shell run on a host before the rank: its share of the GPUs."""
    if not MH_GPUS:
        return ""
    per = gpus_per_host()
    if MH_GPUS == 1:
        return "export CUDA_VISIBLE_DEVICES=0; "
    return ('k=$(( $(hostname | tr -d h) - 1 )); export CUDA_VISIBLE_DEVICES=$(seq -s, '
            '$((k * %d)) $((k * %d + %d))); ' % (per, per, per - 1))


class Ranks:
    """A started launcher (a Popen) with its output read as it comes, so a
    test can look at what ranks said while the launcher still runs."""

    def __init__(self, proc):
        self.proc = proc
        self.lines = {"out": [], "err": []}
        self.threads = [threading.Thread(target=self._read, args=(stream, self.lines[key]),
                                         daemon=True)
                        for key, stream in (("out", proc.stdout), ("err", proc.stderr))]
        for t in self.threads:
            t.start()

    @staticmethod
    def _read(stream, into):
        with stream:  # closed once every writer (on every host) is gone
            for line in stream:
                into.append(line)

    def text(self):
        """stdout and stderr so far."""
        return "".join(self.lines["out"]) + "".join(self.lines["err"])

    def wait(self, timeout):
        """The launcher's exit status, or None if it still runs after
        `timeout` seconds."""
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        for t in self.threads:  # a cut-off host may still hold the pipes
            t.join(timeout=2)
        return rc


class MpirunLauncher:
    """Open MPI's mpirun --hostfile, started on h1 as a user does on the first
    host: daemons on the other hosts through an rsh agent (no ssh here), TCP
    restricted to the hosts' subnet, every rank printing its host before it
    execs trainyard. Layouts: ranks in host order, one per host
    (--map-by node) or two per host (--map-by slot, the host file's 2 slots)."""

    name = "mpirun"
    # what it prints when every process of `host` died: it names the host
    # (by its address, as the host file does) and its daemon, not the rank
    HOST_LOST = (r"ORTE has lost communication with a remote daemon",
                 r"Remote daemon: \[\[\d+,\d+\],\d+\] on node {addr}\b")
    SHOW_HOST = (host_prelude()
                 + 'echo "rank $OMPI_COMM_WORLD_RANK runs on host $(hostname)" >&2; exec "$@"')

    @staticmethod
    def why_unavailable(cfg):
        return netns_hosts.why_unavailable(need_mpirun=True) or dist.mpi_missing(cfg)

    def __init__(self, hosts, folder):
        self.hosts, self.folder = hosts, folder
        self.agent = hosts.write_rsh_agent(os.path.join(folder, "rsh_agent.sh"))

    def argv(self, layout, argv):
        used = sorted(set(layout), key=layout.index)
        by_node = [used[i % len(used)] for i in range(len(layout))]
        by_slot = [used[i // 2] for i in range(len(layout))]
        if layout not in (by_node, by_slot):
            raise ValueError("mpirun places ranks in host order, one or two per host, not %r"
                             % layout)
        # the hosts this run uses, as a user drops a dead host from the file
        hostfile = self.hosts.write_hostfile(
            os.path.join(self.folder, "hostfile-" + "-".join(used)), 2, used, by_address=True)
        return (dist.MPIRUN + ["--hostfile", hostfile,
                               # the rsh launcher, whatever the machine's
                               # default (the GPU machines set
                               # OMPI_MCA_plm=isolated: this host only)
                               "--mca", "plm", "rsh",
                               "--mca", "plm_rsh_agent", self.agent,
                               "--mca", "oob_tcp_if_include", netns_hosts.SUBNET,
                               "--mca", "btl_tcp_if_include", netns_hosts.SUBNET,
                               "-np", str(len(layout)),
                               "--map-by", "node" if layout == by_node else "slot",
                               "sh", "-c", self.SHOW_HOST, "sh"] + list(argv))

    def start(self, layout, argv, env=None):
        """Ranks 0.. on the hosts of `layout` (a host name per rank) run
        `argv`; a Ranks."""
        proc = self.hosts.popen("h1", self.argv(layout, argv), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dist.rank_env(env))
        return Ranks(proc)

    def rank_pid(self, ranks, rank):
        """The pid of rank `rank` (on whichever host), or None."""
        want = ("OMPI_COMM_WORLD_RANK=%d" % rank).encode()
        for host in self.hosts.names:
            for pid in self.hosts.pids(host):
                try:
                    with open("/proc/%d/environ" % pid, "rb") as f:
                        env = f.read().split(b"\0")
                except OSError:
                    continue
                if want in env:
                    return pid
        return None


class _Procs:
    """Several ranks' processes seen as one launcher process: poll() is None
    while any runs, else the first non-zero status (0 when all ended well)."""

    def __init__(self, procs):
        self.procs = procs

    def _status(self):
        codes = [p.returncode for p in self.procs]
        return next((c for c in codes if c != 0), 0)

    def poll(self):
        if any(p.poll() is None for p in self.procs):
            return None
        return self._status()

    def wait(self, timeout):
        deadline = time.monotonic() + timeout
        for p in self.procs:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))  # TimeoutExpired goes up
        return self._status()


class EnvRanks(Ranks):
    """The ranks of an environment launch: one process each, read as they
    print (rank i's lines prefixed "[rank i] ")."""

    def __init__(self, procs):
        self.proc = _Procs(procs)
        self.lines = {"out": [], "err": []}
        self.threads = []
        for i, p in enumerate(procs):
            for key, stream in (("out", p.stdout), ("err", p.stderr)):
                t = threading.Thread(target=self._read_tagged, args=(stream, self.lines[key], i),
                                     daemon=True)
                t.start()
                self.threads.append(t)

    @staticmethod
    def _read_tagged(stream, into, rank):
        with stream:
            for line in stream:
                into.append("[rank %d] %s" % (rank, line))


class EnvLauncher:
    """The launch without MPI across hosts: every rank started on its host
    as torchrun or srun would start it there (RANK, WORLD_SIZE, LOCAL_RANK,
    MASTER_ADDR = h1's address, MASTER_PORT, TRAINYARD_JOB_TOKEN:
    tests/common/env_launch.py), meeting at rank 0's TCP rendezvous on h1
    and talking over the Trainyard TCP transport across the bridge. Any
    placement of ranks on hosts."""

    name = "environment launch"
    PORT = 29500  # free: h1's namespace is new
    # rank 0 sees the connection of every process of `host` end
    HOST_LOST = (r"rank 1 \(host {host}, 10\.88\.0\.\d+\) closed its connection",)
    SHOW_HOST = host_prelude() + 'echo "rank $RANK runs on host $(hostname)" >&2; exec "$@"'

    @staticmethod
    def why_unavailable(cfg):
        return netns_hosts.why_unavailable(need_mpirun=False)

    def __init__(self, hosts, folder):
        self.hosts, self.folder = hosts, folder

    def envs(self, layout, env=None):
        base = dict(os.environ)
        base.update(env or {})
        local = [layout[:i].count(h) for i, h in enumerate(layout)]
        return [env_launch.rank_env(r, len(layout), self.hosts.address("h1"), self.PORT,
                                    local_rank=local[r], base=base)
                for r in range(len(layout))]

    def start(self, layout, argv, env=None, ranks=None):
        """Ranks 0.. on the hosts of `layout` run `argv` (only the ranks in
        `ranks`, when given: the others never come); an EnvRanks."""
        envs = self.envs(layout, env)
        procs = [self.hosts.popen(host, ["sh", "-c", self.SHOW_HOST, "sh"] + list(argv),
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=envs[r])
                 for r, host in enumerate(layout) if ranks is None or r in ranks]
        return EnvRanks(procs)

    def rank_pid(self, ranks, rank):
        """The pid of rank `rank`: every wrapper execs, so the process
        started is trainyard itself."""
        return ranks.proc.procs[rank].pid


def alive(pid):
    """Whether `pid` still runs (a zombie waiting to be reaped does not)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Base(dist.Base):
    """A launcher class has: name; why_unavailable(cfg) (a reason to skip,
    or None); __init__(hosts, folder); start(layout, argv, env) (a Ranks:
    rank i on host layout[i], each printing "rank i runs on host hN" to
    stderr); rank_pid(ranks, rank); HOST_LOST (patterns, {host} and {addr} filled in,
    of what it prints when every process of a host died)."""
    launcher_class = None

    @classmethod
    def setUpClass(cls):
        why = cls.launcher_class.why_unavailable(dist.CFG)
        if why:
            raise unittest.SkipTest(why)

    def setUp(self):
        super().setUp()
        self.common += ["--schedule", "constant", "--max-steps", str(STEPS)]
        if MH_BACKEND:
            self.common[self.common.index("--backend") + 1] = MH_BACKEND
        self.hosts = netns_hosts.Hosts(2).__enter__()
        self.addCleanup(self.hosts.close)
        self.launcher = self.launcher_class(self.hosts, self.tmp)

    def start(self, layout, *args, env=None):
        return self.launcher.start(layout, [dist.CFG.trainyard, "train"] + self.common + list(args),
                                   env=env)

    def train_on(self, layout, *args, env=None, timeout=300):
        """A run of ranks on `layout` that must succeed; its output."""
        ranks = self.start(layout, *args, env=env)
        rc = ranks.wait(timeout)
        if rc is None:
            self.hosts.close()
            self.fail("the %s run on %s did not end within %d s:\n%s"
                      % (self.launcher.name, layout, timeout, ranks.text()[-4000:]))
        self.assertEqual(rc, 0, ranks.text()[-4000:])
        self.assert_placed(ranks.text(), layout)
        return ranks.text()

    def assert_said(self, needle, text):
        if needle not in text:
            self.fail("%r not in the output, which ends:\n%s" % (needle, text[-3000:]))

    def assert_placed(self, text, layout):
        for rank, host in enumerate(layout):
            self.assert_said("rank %d runs on host %s" % (rank, host), text)

    def reference(self):
        """The one-process run every layout must equal: its folder."""
        ref = self.path("ref")
        self.train(*ONE, "--out", ref)
        return ref

    def assert_weights_close(self, ckpt_a, ckpt_b, key_bias=True):
        wa = dist.read_f32_safetensors(os.path.join(ckpt_a, "model.safetensors"))
        wb = dist.read_f32_safetensors(os.path.join(ckpt_b, "model.safetensors"))
        self.assertEqual(sorted(wa), sorted(wb))
        for name in wa:
            a, b = wa[name], wb[name]
            self.assertEqual(len(a), len(b), name)
            if not key_bias and name.endswith("attn.c_attn.bias"):
                third = len(a) // 3
                a, b = a[:third] + a[2 * third:], b[:third] + b[2 * third:]
            worst = max(abs(x - y) for x, y in zip(a, b))
            self.assertLessEqual(worst, REL, name)


class MatchCases:
    """Layouts across the two hosts against one process."""

    def check(self, layout, *args, key_bias=True):
        ref, out = self.reference(), self.path("run")
        text = self.train_on(layout, *args, "--out", out)
        ref_losses, run_losses = dist.losses(ref), dist.losses(out)
        self.assertEqual(sorted(run_losses), list(range(1, STEPS + 1)))
        self.assert_curves_match(ref_losses, run_losses, range(1, STEPS + 1), rel=REL)
        self.assert_weights_close(os.path.join(ref, "checkpoint-%d" % STEPS),
                                  os.path.join(out, "checkpoint-%d" % STEPS), key_bias)
        return text

    def test_data_parallel(self):
        text = self.check(["h1", "h2"], "--batch-size", "2")
        self.assert_said("data parallel: 2 ranks", text)

    def test_zero1(self):
        text = self.check(["h1", "h2"], "--batch-size", "2", "--zero", "1")
        self.assert_said("per rank (2 ranks, data parallel, ZeRO-1)", text)

    def test_tensor_parallel(self):
        text = self.check(["h1", "h2"], *ONE, "--tp", "2", key_bias=False)
        self.assert_said("tensor parallel: 2 ranks = dp 1 x pp 1 x tp 2", text)

    def test_pipeline_parallel(self):
        text = self.check(["h1", "h2"], *ONE, "--pp", "2", key_bias=False)
        self.assert_said("pipeline parallel: 2 stages", text)

    def test_four_ranks(self):
        if MH_GPUS and gpus_per_host() < 2:
            self.skipTest("2 ranks per host need 2 GPUs per host (%d GPUs here)" % MH_GPUS)
        # tp inside a host (its two slots), the replicas across the hosts:
        # the layout a host file of 2-slot hosts gives
        text = self.check(["h1", "h1", "h2", "h2"], "--batch-size", "2", "--tp", "2",
                          key_bias=False)
        self.assert_said("tensor parallel: 4 ranks = dp 2 x pp 1 x tp 2", text)


class FaultCases:
    """A fault on h2 while rank 0 (h1) and rank 1 (h2) train."""

    def start_and_fault(self, fault):
        """Starts the 2-rank run, waits for checkpoint-2, calls fault();
        (the run, its folder, the time of the fault, rank 0's pid)."""
        out = self.path("run")
        ranks = self.start(["h1", "h2"], "--batch-size", "2", "--save-every", "2",
                           "--dist-timeout", str(DIST_TIMEOUT), "--out", out,
                           env={"TRAINYARD_DEBUG_STEP_SLEEP_MS": STEP_SLEEP_MS})
        deadline = time.monotonic() + 120
        while not os.path.isdir(os.path.join(out, "checkpoint-2")):
            if ranks.proc.poll() is not None or time.monotonic() > deadline:
                self.fail("no checkpoint-2 before the fault:\n" + ranks.text()[-4000:])
            time.sleep(0.05)
        rank0 = self.launcher.rank_pid(ranks, 0)
        self.assertIsNotNone(rank0, "rank 0's process not found")
        self.assertFalse(os.path.isdir(os.path.join(out, "checkpoint-%d" % STEPS)),
                         "the run ended before the fault")
        began = time.monotonic()
        fault()
        return ranks, out, began, rank0

    def check_resume_on_h1(self, out):
        """The last checkpoint is whole and resumes on h1 alone, on the
        uninterrupted curve."""
        done = [int(n.split("-")[1]) for n in os.listdir(out) if re.match(r"checkpoint-\d+$", n)]
        self.assertTrue(done, os.listdir(out))
        last = max(done)
        self.assertGreaterEqual(last, 2)
        self.assertLess(last, STEPS)
        with open(os.path.join(out, "checkpoint-%d" % last, "trainer_state.json")) as f:
            self.assertEqual(json.load(f)["step"], last)
        ref = self.reference()
        text = self.train_on(["h1"], *ONE, "--out", out, "--resume", "latest")
        self.assertRegex(text, r"resuming from \S*checkpoint-%d at step %d" % (last, last))
        self.assert_curves_match(dist.losses(ref), dist.losses(out), range(last + 1, STEPS + 1),
                                 rel=REL)
        self.assert_weights_close(os.path.join(ref, "checkpoint-%d" % STEPS),
                                  os.path.join(out, "checkpoint-%d" % STEPS))

    def test_host_dies(self):
        ranks, out, began, _ = self.start_and_fault(lambda: self.hosts.kill_host("h2"))
        rc = ranks.wait(DIST_TIMEOUT + 10 - (time.monotonic() - began))
        text = ranks.text()
        self.assertIsNotNone(rc, "still running %d s after h2 died:\n%s"
                             % (DIST_TIMEOUT + 10, text[-4000:]))
        self.assertNotEqual(rc, 0, text[-4000:])
        print("%s ended %.1f s after h2 died" % (self.launcher.name, time.monotonic() - began),
              file=sys.stderr)
        self.assert_placed(text, ["h1", "h2"])  # rank 1 ran on h2
        for pattern in self.launcher.HOST_LOST:
            if not re.search(pattern.format(host="h2", addr=re.escape(self.hosts.address("h2"))),
                             text):
                self.fail("%r not in the output, which ends:\n%s" % (pattern, text[-3000:]))
        self.check_resume_on_h1(out)

    def test_link_down(self):
        ranks, out, began, rank0 = self.start_and_fault(lambda: self.hosts.link_down("h2"))
        bound = began + DIST_TIMEOUT + 10
        # the transport may add the address: "on host h2 (10.88.0.2)"; the link
        # goes down between two collectives (h2 never reaches the next) or in the
        # middle of one (h2 stops answering while its data moves)
        said = re.compile(r"rank 0: trainyard train: DEADLINE_EXCEEDED: rank 1 on host h2"
                          r"(?: \(10\.88\.0\.2\))? (?:did not reach|stopped answering during)")
        while (alive(rank0) or not said.search(ranks.text())) and time.monotonic() < bound:
            time.sleep(0.05)
        text = ranks.text()
        print("rank 0 ended %.1f s after h2's link went down" % (time.monotonic() - began),
              file=sys.stderr)
        self.assertFalse(alive(rank0), "rank 0 still runs %d s after h2's link went down:\n%s"
                         % (DIST_TIMEOUT + 10, text[-4000:]))
        self.assertRegex(text, said)
        self.assert_said("within %d s (--dist-timeout): it died or hangs" % DIST_TIMEOUT, text)
        # mpirun waits for h2's daemon behind the dead link (docstring)
        self.hosts.kill_host("h1")
        self.hosts.kill_host("h2")
        self.assertIsNotNone(ranks.wait(30))
        self.check_resume_on_h1(out)


class MpirunMatchTest(MatchCases, Base):
    launcher_class = MpirunLauncher


class MpirunFaultTest(FaultCases, Base):
    launcher_class = MpirunLauncher


class EnvMatchTest(MatchCases, Base):
    launcher_class = EnvLauncher


class EnvFaultTest(FaultCases, Base):
    launcher_class = EnvLauncher

    def test_rank_never_arrives(self):
        # a 2-host run saves checkpoint-2; its restart on both hosts, where
        # h2's rank never comes, ends on h1 within --dist-timeout + 10 s
        # naming the missing rank, and the checkpoint then resumes on h1 alone
        out = self.path("run")
        self.train_on(["h1", "h2"], "--batch-size", "2", "--max-steps", "2", "--out", out)
        began = time.monotonic()
        ranks = self.launcher.start(
            ["h1", "h2"], [dist.CFG.trainyard, "train"] + self.common
            + ["--batch-size", "2", "--dist-timeout", str(DIST_TIMEOUT), "--out", out,
               "--resume", "latest"], ranks=[0])
        rc = ranks.wait(DIST_TIMEOUT + 10)
        text = ranks.text()
        self.assertIsNotNone(rc, "rank 0 still runs %d s after it started:\n%s"
                             % (DIST_TIMEOUT + 10, text[-4000:]))
        print("rank 0 ended %.1f s after it started alone" % (time.monotonic() - began),
              file=sys.stderr)
        self.assertNotEqual(rc, 0, text[-4000:])
        self.assertRegex(text, r"rank 1 never arrived at the rendezvous 10\.88\.0\.1:%d "
                               r"within %d s \(rank 0 did\)" % (EnvLauncher.PORT, DIST_TIMEOUT))
        self.assertEqual(sorted(n for n in os.listdir(out) if n.startswith("checkpoint-")),
                         ["checkpoint-2"])
        self.check_resume_on_h1(out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--models", required=True, help="tests/fixtures/models")
    parser.add_argument("--mpi-shim", required=True, help="the build's libty_mpi.so")
    cfg, rest = parser.parse_known_args()
    dist.CFG = cfg
    dist.cli_util.CFG = cfg  # its dataset maker runs CFG.trainyard
    return unittest_exit.run([sys.argv[0]] + rest, module="__main__")


if __name__ == "__main__":
    sys.exit(main())
