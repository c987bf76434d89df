"""Issue 16: `trainyard control list|status|save|stop|abort` against live
`trainyard train` runs (slowed down with TRAINYARD_DEBUG_STEP_SLEEP_MS):
save makes a loadable checkpoint while the run goes on, stop exits 0 with a
checkpoint, abort exits non-zero and the previous checkpoint loads; the
socket is 0600 and another user cannot control the run (run as root: a
forked child setuid to nobody), a socket of another user is refused by the
client, a stale entry of a SIGKILLed run is removed and not listed; bad
commands and registries; a FIFO in the registry does not block list, and an
entry whose pid is out of range is reported, not read as another pid and
removed. Standard library only."""
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import unittest

import cli_util  # noqa: E402  (beside this file)
from cli_util import run, write  # noqa: E402

NOBODY = 65534


class Base(cli_util.TempDirTest):
    def setUp(self):
        super().setUp()
        self.registry = self.path("xdg", "trainyard")
        os.makedirs(self.path("xdg"), mode=0o700)
        self.env = {"XDG_RUNTIME_DIR": self.path("xdg")}
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.log.close()
        super().tearDown()

    def start(self, out, *extra, sleep_ms=150):
        data = self.path("ids")
        if not os.path.isdir(data):
            cli_util.make_ids_dataset(data)
        env = dict(os.environ, TRAINYARD_DEBUG_STEP_SLEEP_MS=str(sleep_ms), **self.env)
        # Files, not pipes: a pipe nobody reads would stall the run's step lines.
        log = open(self.path("log-%d.txt" % len(self.procs)), "w+")
        p = subprocess.Popen([cli_util.CFG.trainyard, "train", "--preset", "gpt2-tiny", "--data",
                              data, "--out", out, "--max-steps", "2000", "--batch-size", "2",
                              "--cache-dir", "none"] + list(extra),
                             stdout=log, stderr=log, text=True, env=env)
        p.log = log
        self.procs.append(p)
        return p

    @staticmethod
    def output(p):
        p.log.flush()
        p.log.seek(0)
        return p.log.read()

    def control(self, *args, rc=0):
        r = run(["control"] + list(args), env=self.env)
        self.assertEqual(r.returncode, rc, "control %s: rc %d\n%s%s" % (
            " ".join(args), r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
        return r

    def control_json(self, *args):
        return json.loads(self.control(*(list(args) + ["--json"])).stdout)

    def wait_live(self, p, *registry):
        """Polls list until run p is live and has made a step."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            self.assertIsNone(p.poll(), "the run ended early:\n%s" % self.output(p)[-3000:])
            runs = json.loads(run(["control", "list", "--json"] + list(registry),
                                  env=self.env).stdout or "{}").get("runs", [])
            mine = [x for x in runs if x["pid"] == p.pid]
            if mine and mine[0]["step"] >= 1:
                return mine[0]
            time.sleep(0.2)
        self.fail("run %d never showed up in control list" % p.pid)

    def loads(self, checkpoint):
        """A checkpoint loads: `trainyard forward` runs it."""
        tokens = write(self.path("t.json"), "[[1, 2, 3, 4]]")
        r = run(["forward", "--model", checkpoint, "--tokens", tokens, "--out",
                 self.path("f.st")])
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])

    def checkpoints(self, out):
        return sorted(int(n.split("-")[1]) for n in os.listdir(out) if n.startswith("checkpoint-"))


class ControlTest(Base):
    def test_list_status_save_stop(self):
        out = self.path("run")
        p = self.start(out)
        live = self.wait_live(p)
        self.assertEqual(live["out"], os.path.realpath(out))
        self.assertEqual(live["backend"], "cpu:0")
        self.assertEqual(live["total_steps"], 2000)
        for key in ("loss", "tokens_per_s", "eta_s"):
            self.assertIsInstance(live[key], float, key)
        text = self.control("list").stdout
        self.assertIn(str(p.pid), text)
        self.assertIn(os.path.realpath(out), text)
        for column in ("PID", "STEP", "LOSS", "TOK/S", "ETA", "BACKEND", "OUT"):
            self.assertIn(column, text)
        status = self.control_json("status", str(p.pid))
        self.assertEqual(status["config"]["max_steps"], 2000)
        self.assertEqual(status["config"]["preset"], "gpt2-tiny")
        self.assertIn("configuration:", self.control("status", out).stdout)
        # save: a loadable checkpoint, and the run goes on
        saved = self.control_json("save", str(p.pid))
        self.assertTrue(saved["ok"])
        step = saved["step"]
        self.assertEqual(saved["checkpoint"], os.path.join(out, "checkpoint-%d" % step))
        self.loads(saved["checkpoint"])
        time.sleep(1.0)
        self.assertIsNone(p.poll())
        self.assertGreater(self.control_json("status", out)["step"], step)
        # stop: a checkpoint and exit 0; the entry and the socket are gone
        stopped = self.control("stop", out).stdout
        self.assertIn("saved; stopping", stopped)
        self.assertEqual(p.wait(timeout=60), 0, self.output(p)[-2000:])
        last = self.checkpoints(out)[-1]
        self.assertIn("after step %d" % last, stopped)
        self.loads(os.path.join(out, "checkpoint-%d" % last))
        self.assertIn("stop requested by 'trainyard control'", self.output(p))
        self.assertEqual(os.listdir(self.registry), [])
        self.assertFalse(os.path.exists(os.path.join(out, ".trainyard.control.sock")))
        self.assertNotIn(str(p.pid), self.control("list").stdout)

    def test_abort_keeps_the_previous_checkpoint(self):
        # an explicit registry folder on both sides, and a run folder whose
        # socket path is longer than sun_path's 108 bytes
        registry = self.path("reg")
        out = self.path("a" * 60, "b" * 60, "run")
        self.assertGreater(len(out + "/.trainyard.control.sock"), 108)
        p = self.start(out, "--control-registry", registry)
        self.wait_live(p, "--registry", registry)
        self.assertEqual(os.listdir(self.registry) if os.path.isdir(self.registry) else [], [])
        saved = self.control_json("save", out, "--registry", registry)
        time.sleep(0.5)
        aborted = self.control_json("abort", str(p.pid), "--registry", registry)
        self.assertTrue(aborted["ok"])
        self.assertEqual(p.wait(timeout=60), 1)
        err = self.output(p)
        self.assertIn("aborted by 'trainyard control abort'", err)
        self.assertGreater(aborted["step"], saved["step"])
        self.assertEqual(self.checkpoints(out), [saved["step"]])
        self.loads(saved["checkpoint"])
        self.assertEqual(os.listdir(registry), [])

    def test_socket_is_the_owners_alone(self):
        out = self.path("run")
        p = self.start(out)
        self.wait_live(p)
        sock = os.path.join(out, ".trainyard.control.sock")
        self.assertEqual(stat.S_IMODE(os.stat(sock).st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(self.registry).st_mode), 0o700)
        if os.geteuid() != 0:
            self.skipTest("a second user needs root (os.setuid in a child); running as uid %d"
                          % os.geteuid())
        # the folders open to nobody, the socket too: the run's SO_PEERCRED check refuses
        os.chmod(self.tmp, 0o755)
        os.chmod(out, 0o755)
        os.chmod(sock, 0o666)
        reply = self.as_nobody(lambda: self.raw_call(sock, {"command": "stop"}))
        self.assertFalse(reply.get("ok", True), reply)
        self.assertIn("only its owner controls it", reply["error"])
        os.chmod(sock, 0o600)
        self.assertEqual(self.as_nobody(lambda: self.raw_call(sock, {"command": "stop"}))["error"],
                         "PermissionError")
        time.sleep(0.5)
        self.assertIsNone(p.poll(), "another user's stop stopped the run")
        # a socket of another user's, registered as a run: the client refuses it
        fake_dir = self.path("fake")
        os.makedirs(fake_dir)
        os.chown(fake_dir, NOBODY, NOBODY)
        fake = os.path.join(fake_dir, "s.sock")
        read, write_end = os.pipe()
        child = os.fork()
        if child == 0:
            try:
                os.setuid(NOBODY)
                s = socket.socket(socket.AF_UNIX)
                s.bind(fake)
                s.listen(1)
                os.write(write_end, b"x")
                time.sleep(30)
            finally:
                os._exit(0)
        os.read(read, 1)
        try:
            write(os.path.join(self.registry, "%d.json" % child), json.dumps(
                {"pid": child, "out": fake_dir, "socket": fake, "backend": "cpu:0"}))
            r = self.control("status", str(child), rc=1)
            self.assertIn("owned by another user", r.stderr)
        finally:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
        self.control("stop", str(p.pid))
        self.assertEqual(p.wait(timeout=60), 0)

    @staticmethod
    def raw_call(path, request):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(path)
            s.sendall((json.dumps(request) + "\n").encode())
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        return json.loads(data)

    def as_nobody(self, fn):
        """fn() in a child that runs as uid nobody; its result (JSON), or the
        name of the exception it raised."""
        read, write_end = os.pipe()
        child = os.fork()
        if child == 0:
            try:
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                try:
                    result = fn()
                except Exception as e:  # noqa: BLE001 (reported to the parent)
                    result = {"error": type(e).__name__, "text": str(e)}
                os.write(write_end, json.dumps(result).encode())
            finally:
                os._exit(0)
        os.close(write_end)
        data = b""
        while True:
            chunk = os.read(read, 65536)
            if not chunk:
                break
            data += chunk
        os.waitpid(child, 0)
        return json.loads(data)

    def test_stale_entry_of_a_killed_run(self):
        out = self.path("run")
        p = self.start(out)
        self.wait_live(p)
        p.send_signal(signal.SIGKILL)
        p.wait()
        entry = os.path.join(self.registry, "%d.json" % p.pid)
        self.assertTrue(os.path.exists(entry))
        r = self.control("list")
        self.assertNotIn(out, r.stdout)
        self.assertIn("removed the stale entry of run %d" % p.pid, r.stderr)
        self.assertFalse(os.path.exists(entry))
        self.assertEqual(self.control_json("list")["runs"], [])
        r = self.control("status", str(p.pid), rc=1)
        self.assertIn("no running trainyard train with pid %d" % p.pid, r.stderr)
        # the next run in that folder replaces the socket the killed one left,
        # and RUN given as the folder finds it, not a killed run's entry
        self.assertTrue(os.path.exists(os.path.join(out, ".trainyard.control.sock")))
        q = self.start(out, "--overwrite")
        self.assertEqual(self.wait_live(q)["out"], os.path.realpath(out))
        r = self.kill_and_restart(out, q)
        self.control("abort", out)
        self.assertEqual(r.wait(timeout=60), 1)
        self.control("list")
        self.assertEqual(os.listdir(self.registry), [])

    def kill_and_restart(self, out, q):
        """Kills run q, leaving its entry, and starts another in `out`."""
        q.send_signal(signal.SIGKILL)
        q.wait()
        self.assertTrue(os.path.exists(os.path.join(self.registry, "%d.json" % q.pid)))
        r = self.start(out, "--overwrite")
        self.wait_live(r)
        write(os.path.join(self.registry, "%d.json" % q.pid), json.dumps(
            {"pid": q.pid, "out": os.path.realpath(out),
             "socket": os.path.join(os.path.realpath(out), ".trainyard.control.sock"),
             "backend": "cpu:0"}))
        return r

    def test_fifo_and_out_of_range_pid_entries(self):
        """A FIFO named like an entry once blocked `control list` for ever;
        an entry with pid 4294967297 was read as pid 1 and removed as
        gone. Both are now reported as unreadable and left in place."""
        self.control("list")  # creates the registry
        fifo = os.path.join(self.registry, "4242.json")
        os.mkfifo(fifo, 0o600)
        big = write(os.path.join(self.registry, "4294967297.json"), json.dumps(
            {"pid": 4294967297, "out": self.path("o"), "socket": self.path("o", "s.sock")}))
        started = time.monotonic()
        r = run(["control", "list"], env=self.env, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertLess(time.monotonic() - started, 20)
        self.assertIn("skipped the unreadable registry entry %s: not a regular file (a FIFO)"
                      % fifo, r.stderr)
        self.assertIn("its pid 4294967297 is not a process id", r.stderr)
        self.assertNotIn("removed the stale entry", r.stderr)
        self.assertTrue(os.path.exists(big))
        self.assertTrue(stat.S_ISFIFO(os.lstat(fifo).st_mode))
        listed = self.control_json("list")
        self.assertEqual(listed["runs"], [])
        self.assertEqual(sorted(u["entry"] for u in listed["unreadable"]), sorted([big, fifo]))
        # status by pid neither blocks on the FIFO nor takes the entry for pid 1
        r = run(["control", "status", "1"], env=self.env, timeout=30)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("no running trainyard train with pid 1", r.stderr)
        self.assertTrue(os.path.exists(big))

    def test_bad_commands_and_registries(self):
        for args, needle in [([], "give list"), (["bogus"], "unknown command 'bogus'"),
                             (["status"], "status takes one RUN"),
                             (["list", "x"], "list takes no RUN"),
                             (["save", "1", "2"], "save takes one RUN"),
                             (["--bogus", "list"], "--bogus")]:
            with self.subTest(args=args):
                self.assertIn(needle, self.control(*args, rc=2).stderr)
        self.control("list")
        self.assertIn("no running trainyard train with pid 999999",
                      self.control("stop", "999999", rc=1).stderr)
        self.assertIn("neither a pid nor a run folder",
                      self.control("status", self.path("nowhere"), rc=1).stderr)
        os.chmod(self.registry, 0o755)
        self.assertIn("open to others", self.control("list", rc=1).stderr)
        os.chmod(self.registry, 0o700)
        f = write(self.path("file"), "x")
        self.assertIn("not a folder", self.control("list", "--registry", f, rc=1).stderr)
        # train: an explicit registry it cannot use is an error before step 0
        data = cli_util.make_ids_dataset(self.path("ids"))
        r = run(["train", "--preset", "gpt2-tiny", "--data", data, "--out", self.path("o"),
                 "--max-steps", "1", "--cache-dir", "none", "--control-registry", f])
        self.assertEqual(r.returncode, 1)
        self.assertIn("--control-registry", r.stderr)
        self.assertFalse(os.path.exists(self.path("o", "checkpoint-1")))

    def test_socket_path_taken_in_out(self):
        """Issue 33: a file where the control socket goes is the run folder's
        fault (--out), never the registry's: an error naming --out with a
        registry asked for, a warning naming it without one."""
        data = cli_util.make_ids_dataset(self.path("ids"))
        os.makedirs(self.path("reg"), mode=0o700)

        def train_args(out):
            os.makedirs(out)
            write(os.path.join(out, ".trainyard.control.sock"), "mine")
            return ["train", "--preset", "gpt2-tiny", "--data", data, "--out", out,
                    "--max-steps", "1", "--cache-dir", "none"]
        out = self.path("o")
        r = run(train_args(out) + ["--control-registry", self.path("reg")], env=self.env)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("--out %s: " % out, r.stderr)
        self.assertIn("is in the way of the control socket (not a socket): move it away",
                      r.stderr)
        self.assertNotIn("--control-registry", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(out, "checkpoint-1")))
        out = self.path("o2")
        r = run(train_args(out), env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("warning: 'trainyard control' cannot reach this run: --out %s: " % out,
                      r.stderr)
        self.assertNotIn("--control-registry", r.stderr)
        with open(os.path.join(out, ".trainyard.control.sock")) as f:
            self.assertEqual(f.read(), "mine")  # the user's file is left alone


if __name__ == "__main__":
    sys.exit(cli_util.main())
