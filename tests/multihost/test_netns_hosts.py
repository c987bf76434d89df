#!/usr/bin/env python3
"""The namespace-host harness itself (netns_hosts.py; issue 36), standard
library only:

- UnavailableTest: each reason it gives to skip (not root, `ip` or
  `unshare` missing, mpirun missing, namespaces not permitted: a user
  namespace's root) names the fix.
- HostsTest (root only, else skipped saying why): n hosts with their names,
  addresses (none in the root namespace) and hostnames; TCP between them;
  link_down/link_up cut and restore it; kill_host ends every process of a
  host; the rsh agent runs a command on a host under its name and refuses
  a host it does not know; everything is removed on exit, on an exception
  and on SIGTERM; a SIGKILLed run's leftovers are removed by the next run,
  those of a live process are kept.
"""
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "common"))
import netns_hosts  # noqa: E402
import unittest_exit  # noqa: E402


def namespaces():
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return {line.split()[0] for line in r.stdout.splitlines() if line.strip()}


def ours(pid):
    """The namespaces named for process `pid`."""
    return {ns for ns in namespaces() if ns.startswith("ty%d" % pid) and
            ns[len("ty%d" % pid)] in "hb"}


def alive(pid):
    """Whether `pid` runs (a zombie does not)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# A child that makes 2 hosts, starts `sleep` on h2, says "ready" and waits.
CHILD = ("import sys, time; sys.path.insert(0, %r); import netns_hosts\n"
         "with netns_hosts.Hosts(2) as h:\n"
         "    h.popen('h2', ['sleep', '300'])\n"
         "    print('ready', flush=True)\n"
         "    time.sleep(300)\n" % HERE)


class UnavailableTest(unittest.TestCase):
    def test_not_root(self):
        with mock.patch.object(os, "geteuid", return_value=1000):
            self.assertEqual(netns_hosts.why_unavailable(),
                             "network-namespace hosts need root (run the test as root, as CI "
                             "does)")

    def path_with(self, *tools):
        folder = tempfile.mkdtemp(prefix="ty_netns_path_")
        self.addCleanup(lambda: [os.unlink(os.path.join(folder, t)) for t in tools] and None
                        or os.rmdir(folder))
        for tool in tools:
            os.symlink("/bin/true", os.path.join(folder, tool))
        return mock.patch.dict(os.environ, {"PATH": folder})

    def test_tools_missing(self):
        with mock.patch.object(os, "geteuid", return_value=0):
            with self.path_with("unshare"):
                self.assertEqual(netns_hosts.why_unavailable(),
                                 "'ip' is not installed (install iproute2)")
            with self.path_with("ip"):
                self.assertEqual(netns_hosts.why_unavailable(),
                                 "'unshare' is not installed (install util-linux)")
            with self.path_with("ip", "unshare"):
                self.assertEqual(netns_hosts.why_unavailable(need_mpirun=True),
                                 "mpirun is not installed (scripts/install-deps.sh installs "
                                 "openmpi-bin)")

    def test_namespaces_not_permitted(self):
        # the root of a user namespace: euid 0, no right to mount /run/netns
        if os.geteuid() != 0 or not netns_hosts.shutil.which("unshare"):
            self.skipTest("needs root and unshare")
        r = subprocess.run(["unshare", "--user", "--map-root-user", sys.executable, "-c",
                            "import sys; sys.path.insert(0, %r); import netns_hosts; "
                            "print(netns_hosts.why_unavailable())" % HERE],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            self.skipTest("no user namespace here: " + r.stderr.strip())
        self.assertIn("network namespaces are not permitted here ('ip netns add' said: ",
                      r.stdout)
        self.assertIn("a container needs CAP_SYS_ADMIN", r.stdout)


class HostsTest(unittest.TestCase):
    def setUp(self):
        why = netns_hosts.why_unavailable()
        if why:
            self.skipTest(why)

    def test_hosts(self):
        with netns_hosts.Hosts(3) as hosts:
            pid = os.getpid()
            self.assertEqual(ours(pid), {"ty%dbr" % pid, "ty%dh1" % pid, "ty%dh2" % pid,
                                         "ty%dh3" % pid})
            self.assertEqual(hosts.names, ["h1", "h2", "h3"])
            for i, host in enumerate(hosts.names):
                addr = subprocess.run(["ip", "-n", hosts.ns(host), "-o", "-4", "addr"],
                                      capture_output=True, text=True).stdout
                self.assertIn("lo    inet 127.0.0.1/8", addr)
                self.assertIn("eth0    inet 10.88.0.%d/24" % (i + 1), addr)
                r = hosts.run(host, ["hostname"], capture_output=True, text=True)
                self.assertEqual(r.stdout.strip(), host)
            # nothing in the machine's own namespace
            self.assertNotIn("10.88.0.", subprocess.run(["ip", "-o", "addr"],
                                                        capture_output=True, text=True).stdout)
            self.assertNotEqual(subprocess.run(["hostname"], capture_output=True,
                                               text=True).stdout.strip(), "h1")
            # TCP from h1 to h3, cut by h3's link going down, back with it up
            server = hosts.popen("h3", [sys.executable, "-c",
                                        "import socket\n"
                                        "s = socket.create_server(('10.88.0.3', 9000))\n"
                                        "print('up', flush=True)\n"
                                        "while True:\n"
                                        "    c, _ = s.accept(); c.sendall(b'hello'); c.close()"],
                                 stdout=subprocess.PIPE, text=True)
            self.assertEqual(server.stdout.readline(), "up\n")
            client = [sys.executable, "-c",
                      "import socket\n"
                      "print(socket.create_connection(('10.88.0.3', 9000), timeout=2)"
                      ".recv(5).decode())"]
            r = hosts.run("h1", client, capture_output=True, text=True, timeout=60)
            self.assertEqual(r.stdout.strip(), "hello", r.stderr)
            hosts.link_down("h3")
            r = hosts.run("h1", client, capture_output=True, text=True, timeout=60)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("timed out", r.stderr)
            hosts.link_up("h3")
            deadline = time.monotonic() + 30
            while True:  # the link takes a moment to carry again
                r = hosts.run("h1", client, capture_output=True, text=True, timeout=60)
                if r.stdout.strip() == "hello" or time.monotonic() > deadline:
                    break
            self.assertEqual(r.stdout.strip(), "hello", r.stderr)
            # the host dies: every process in it
            sleeper = hosts.popen("h3", ["sleep", "300"])
            hosts.kill_host("h3")
            self.assertEqual(server.wait(timeout=10), -signal.SIGKILL)
            self.assertEqual(sleeper.wait(timeout=10), -signal.SIGKILL)
            self.assertEqual(hosts.pids("h3"), [])
            server.stdout.close()
            with self.assertRaisesRegex(ValueError, r"no host 'h9' \(hosts: h1, h2, h3\)"):
                hosts.ns("h9")
        self.assertEqual(ours(os.getpid()), set())

    def test_bad_count(self):
        with self.assertRaisesRegex(ValueError, "Hosts\\(n\\) takes 1 to 250 hosts, not 0"):
            netns_hosts.Hosts(0)

    def test_rsh_agent(self):
        with netns_hosts.Hosts(2) as hosts, tempfile.TemporaryDirectory() as tmp:
            agent = hosts.write_rsh_agent(os.path.join(tmp, "agent.sh"))
            # a shell line, as mpirun gives it
            r = hosts.run("h1", [agent, "h2", "echo", "on;", "hostname"], capture_output=True,
                          text=True)
            self.assertEqual(r.stdout.split(), ["on", "h2"], r.stderr)
            r = hosts.run("h1", [agent, "10.88.0.2", "hostname"], capture_output=True, text=True)
            self.assertEqual(r.stdout.split(), ["h2"], r.stderr)
            r = hosts.run("h1", [agent, "h3", "true"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 1)
            self.assertEqual(r.stderr, "rsh agent: no host 'h3' (hosts: h1 h2)\n")
            # the remote side killed: 255, as ssh says
            p = hosts.popen("h1", [agent, "h2", "sleep", "300"])
            deadline = time.monotonic() + 10
            while not hosts.pids("h2") and time.monotonic() < deadline:
                time.sleep(0.05)
            hosts.kill_host("h2")
            self.assertEqual(p.wait(timeout=10), 255)
            hf = hosts.write_hostfile(os.path.join(tmp, "hosts"), 2)
            with open(hf) as f:
                self.assertEqual(f.read(), "h1 slots=2\nh2 slots=2\n")
            hf = hosts.write_hostfile(os.path.join(tmp, "hosts"), 1, ["h2"], by_address=True)
            with open(hf) as f:
                self.assertEqual(f.read(), "10.88.0.2 slots=1\n")

    def test_exception_removes_everything(self):
        with self.assertRaises(RuntimeError):
            with netns_hosts.Hosts(2) as hosts:
                sleeper = hosts.popen("h1", ["sleep", "300"])
                raise RuntimeError("a failing test")
        self.assertEqual(ours(os.getpid()), set())
        self.assertEqual(sleeper.wait(timeout=10), -signal.SIGKILL)

    def start_child(self):
        child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
        self.assertEqual(child.stdout.readline(), "ready\n")
        child.stdout.close()
        self.assertEqual(len(ours(child.pid)), 3)
        return child

    def test_sigterm_removes_everything(self):
        child = self.start_child()
        child.send_signal(signal.SIGTERM)  # ctest's timeout
        self.assertEqual(child.wait(timeout=30), -signal.SIGTERM)
        self.assertEqual(ours(child.pid), set())

    def test_leftovers_of_dead_runs_are_removed(self):
        child = self.start_child()
        made = ours(child.pid)
        sleeper = [int(p) for p in subprocess.run(
            ["ip", "netns", "pids", "ty%dh2" % child.pid], capture_output=True,
            text=True).stdout.split()]
        self.assertTrue(sleeper)
        child.kill()  # no chance to clean up
        child.wait()
        self.assertEqual(ours(child.pid), made)
        # a live process's namespace (ours) is kept
        live = "ty%dh7" % os.getpid()
        subprocess.run(["ip", "netns", "add", live], check=True)
        try:
            removed = netns_hosts.remove_leftovers()
            self.assertEqual(made - set(removed), set())
            self.assertIn(live, namespaces())
        finally:
            subprocess.run(["ip", "netns", "del", live])
        self.assertEqual(ours(child.pid), set())
        for pid in sleeper:  # the processes left in them were killed
            self.assertFalse(alive(pid), pid)


if __name__ == "__main__":
    sys.exit(unittest_exit.run(sys.argv))
