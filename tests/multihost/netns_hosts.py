"""Many hosts on one machine for the tests of issue 36: each "host" is a
network namespace of its own, joined to the others through a bridge that
lives in a namespace of its own, so a test runs launchers across hosts
(addresses, interfaces, a link that goes down, a host that dies) without
touching the machine's own network. Root only; standard library only.

    with netns_hosts.Hosts(2) as hosts:          # h1 10.88.0.1, h2 10.88.0.2
        hosts.run("h1", ["hostname"])            # prints h1
        hosts.link_down("h2"); hosts.kill_host("h2")

Every namespace is named ty<pid>h<N> (ty<pid>br for the bridge), so a run
removes the leftovers of earlier runs whose process is gone (a SIGKILLed
ctest run) and never those of a run still going."""
import os
import re
import shutil
import signal
import subprocess
import time

SUBNET = "10.88.0.0/24"
_LEFTOVER = re.compile(r"^ty(\d+)(?:h\d+|br)$")
_LIVE = []  # the Hosts now set up, for the signal handlers


def why_unavailable(need_mpirun=False):
    """Why namespace hosts cannot be made here (a sentence naming the fix),
    or None."""
    if os.geteuid() != 0:
        return "network-namespace hosts need root (run the test as root, as CI does)"
    for tool, package in (("ip", "iproute2"), ("unshare", "util-linux")):
        if not shutil.which(tool):
            return "'%s' is not installed (install %s)" % (tool, package)
    if need_mpirun and not shutil.which("mpirun"):
        return "mpirun is not installed (scripts/install-deps.sh installs openmpi-bin)"
    probe = "ty%dprobe" % os.getpid()
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return ("network namespaces are not permitted here ('ip netns add' said: %s); a "
                "container needs CAP_SYS_ADMIN (docker run --privileged)" % r.stderr.strip())
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args, check=True):
    r = subprocess.run(["ip"] + list(args), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("ip %s failed: %s" % (" ".join(args), r.stderr.strip()))
    return r


def _netns_names():
    r = _ip("netns", "list", check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def _kill_all(ns):
    """SIGKILLs every process in namespace `ns` and waits until none is
    listed (SIGKILL is not instant: a zombie stays listed until reaped)."""
    for _ in range(50):
        pids = [int(p) for p in _ip("netns", "pids", ns, check=False).stdout.split()]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


def _kill_and_delete(ns):
    """Kills every process in namespace `ns`, then deletes it (a namespace
    with processes in it outlives its name)."""
    _kill_all(ns)
    _ip("netns", "del", ns, check=False)


def remove_leftovers():
    """Removes the namespaces of earlier runs whose process is gone; the
    names it removed."""
    removed = []
    for ns in _netns_names():
        m = _LEFTOVER.match(ns)
        if not m:
            continue
        try:
            os.kill(int(m.group(1)), 0)
            continue  # that run is still going
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        _kill_and_delete(ns)
        removed.append(ns)
    return removed


def _on_signal(signum, frame):
    # ctest's timeout (SIGTERM) or ^C: remove the hosts, then die of the
    # signal as if it had not been caught
    for hosts in list(_LIVE):
        hosts.close()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


class Hosts:
    """n hosts h1..hn: namespace ty<pid>h<i>, interface eth0 with address
    10.88.0.<i>/24, `lo` up; commands run there with hostname h<i> (their own
    UTS namespace), so gethostname() and MPI_Get_processor_name say h<i>."""

    def __init__(self, n):
        if not 1 <= n <= 250:
            raise ValueError("Hosts(n) takes 1 to 250 hosts, not %r" % n)
        self.prefix = "ty%d" % os.getpid()
        self.names = ["h%d" % (i + 1) for i in range(n)]
        self.bridge_ns = self.prefix + "br"
        self._made = []
        self._old_handlers = {}

    # --- set-up and removal

    def __enter__(self):
        remove_leftovers()
        if not _LIVE:
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._old_handlers[signum] = signal.signal(signum, _on_signal)
        _LIVE.append(self)
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _add_ns(self, ns):
        _ip("netns", "add", ns)
        self._made.append(ns)

    def _make(self):
        self._add_ns(self.bridge_ns)
        _ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.bridge_ns, "link", "set", "br0", "up")
        for host in self.names:
            ns, port = self.ns(host), "v" + host
            self._add_ns(ns)
            # one veth pair per host: eth0 in the host, its peer on the bridge
            _ip("-n", self.bridge_ns, "link", "add", port, "type", "veth", "peer", "name",
                "eth0", "netns", ns)
            _ip("-n", self.bridge_ns, "link", "set", port, "master", "br0", "up")
            _ip("-n", ns, "addr", "add", self.address(host) + "/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def close(self):
        """Kills every process in the hosts and removes the namespaces (the
        veth pairs and the bridge go with them). Safe to call twice."""
        while self._made:
            _kill_and_delete(self._made.pop())
        if self in _LIVE:
            _LIVE.remove(self)
            if not _LIVE:
                for signum, old in self._old_handlers.items():
                    signal.signal(signum, old)
                self._old_handlers = {}

    # --- names

    def _index(self, host):
        if host not in self.names:
            raise ValueError("no host %r (hosts: %s)" % (host, ", ".join(self.names)))
        return self.names.index(host)

    def ns(self, host):
        """The network namespace of `host`."""
        self._index(host)
        return self.prefix + host

    def address(self, host):
        return "10.88.0.%d" % (self._index(host) + 1)

    # --- running

    def argv(self, host, argv):
        """`argv` as run on `host`: in its namespace, named `host`."""
        return (["ip", "netns", "exec", self.ns(host), "unshare", "--uts", "sh", "-c",
                 'hostname "$0" && exec "$@"', host] + list(argv))

    def run(self, host, argv, **options):
        """subprocess.run of `argv` on `host` (options as subprocess.run's)."""
        return subprocess.run(self.argv(host, argv), **options)

    def popen(self, host, argv, **options):
        """subprocess.Popen of `argv` on `host`; its pid is the command's own
        (every wrapper execs)."""
        return subprocess.Popen(self.argv(host, argv), **options)

    def pids(self, host):
        return [int(p) for p in _ip("netns", "pids", self.ns(host)).stdout.split()]

    # --- faults

    def kill_host(self, host):
        """The host dies: SIGKILL to every process in its namespace."""
        _kill_all(self.ns(host))

    def link_down(self, host):
        """The host's link goes down (its processes live on, cut off)."""
        _ip("-n", self.ns(host), "link", "set", "eth0", "down")

    def link_up(self, host):
        _ip("-n", self.ns(host), "link", "set", "eth0", "up")

    # --- Open MPI across the hosts

    def write_rsh_agent(self, path):
        """An rsh agent for Open MPI (--mca plm_rsh_agent PATH): where mpirun
        would ssh to a host, it runs the command (a shell line) in that
        host's namespace under its name. Returns `path`.

        Like ssh, it stays on the caller's host and ends with the remote
        command's status, 255 when the remote side was killed; that 255
        comes 2 s later, as ssh's would come after mpirun's own
        connection to the host's daemon broke: reported at once it races
        that connection, and mpirun then says a daemon "failed to start"
        instead of naming the host it lost."""
        by_address = "".join(" %s) host=%s;;" % (self.address(h), h) for h in self.names)
        with open(path, "w") as f:
            f.write("#!/bin/sh\n"
                    "# Open MPI's rsh agent for the namespace hosts of netns_hosts.py\n"
                    'case "$1" in %s) host=$1;;%s *) echo "rsh agent: no host \'$1\' (hosts: %s)"'
                    " >&2; exit 1;; esac\n"
                    "shift\n"
                    'ip netns exec "%s$host" unshare --uts sh -c "hostname $host && $*"\n'
                    "rc=$?\n"
                    "if [ $rc -gt 128 ]; then sleep 2; exit 255; fi\n"
                    "exit $rc\n"
                    % ("|".join(self.names), by_address, " ".join(self.names), self.prefix))
        os.chmod(path, 0o755)
        return path

    def write_hostfile(self, path, slots, hosts=None, by_address=False):
        """An Open MPI host file: each of `hosts` (default: all) with `slots`
        slots, named by its address when `by_address` (the rsh agent takes
        both). Open MPI 4.1.6 (Ubuntu 24.04) maps every rank of a file of
        names that do not resolve onto the first host; addresses work with
        4.1.4 and 4.1.6 alike."""
        with open(path, "w") as f:
            f.write("".join("%s slots=%d\n" % (self.address(h) if by_address else h, slots)
                            for h in hosts or self.names))
        return path
