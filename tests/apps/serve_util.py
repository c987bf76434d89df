"""What the `trainyard serve` tests share: a small model trained here (a
byte-level tokenizer with ChatML markers, gpt2-tiny after two steps, and a
tokenizer_config.json with Qwen2's chat template), a server process on a
free loopback port, and plain HTTP helpers (standard library)."""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import cli_util

QWEN2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

MODEL_DIR = None
_WORK = None


def make_model():
    """Trains the fixture once per process; returns its folder."""
    global MODEL_DIR, _WORK
    if MODEL_DIR:
        return MODEL_DIR
    _WORK = tempfile.mkdtemp(prefix="ty_serve_model_")
    MODEL_DIR = cli_util.train_tiny_model(_WORK, steps=2,
                                          specials=("<|im_start|>", "<|im_end|>"))
    with open(os.path.join(MODEL_DIR, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": QWEN2_TEMPLATE, "eos_token": "<|endoftext|>"}, f)
    return MODEL_DIR


def remove_model():
    if _WORK:
        shutil.rmtree(_WORK, ignore_errors=True)


class Server:
    """`trainyard serve` on 127.0.0.1 at a port the kernel picks."""

    def __init__(self, *args, model=None, plugin_path=None, ready_timeout=120):
        self.model = model or make_model()
        self.err = tempfile.TemporaryFile(mode="w+")
        cmd = [cli_util.CFG.trainyard]
        if plugin_path:
            cmd += ["--plugin-path", plugin_path]
        cmd += ["serve", "--model", self.model, "--port", "0"] + list(args)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.err, text=True)
        line = self.proc.stdout.readline()
        match = re.search(r"listening on http://127\.0\.0\.1:(\d+)/v1 \(model '([^']+)'", line)
        if not match:
            self.proc.wait(timeout=ready_timeout)
            raise AssertionError(f"server did not start: {line!r} {self.stderr()}")
        self.port = int(match.group(1))
        self.name = match.group(2)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def stderr(self):
        self.err.seek(0)
        return self.err.read()

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=timeout)
        self.proc.stdout.close()
        return rc

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.err.close()

    def client(self, api_key="none", **options):
        import openai
        return openai.OpenAI(base_url=self.base_url, api_key=api_key, max_retries=0,
                             timeout=options.pop("timeout", 120), **options)

    def connection(self, timeout=120):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, raw=False):
        """(status, headers, bytes) of one request on a fresh connection."""
        conn = self.connection()
        data = body if raw or body is None else json.dumps(body).encode()
        try:
            conn.request(method, path, body=data, headers=dict(headers or {}))
            resp = conn.getresponse()
            out = resp.status, dict(resp.getheaders()), resp.read()
        except ConnectionError as e:
            # Still a ConnectionError (callers may retry on it), saying what
            # became of the server, so that a failure explains itself.
            time.sleep(0.2)
            raise ConnectionError("%s %s: %r; the server %s; its stderr ends: %s" % (
                method, path, e, "is running" if self.proc.poll() is None else
                "exited with %s" % self.proc.returncode, self.stderr()[-4000:])) from e
        finally:
            conn.close()
        return out

    def post(self, path, body, **kw):
        status, headers, data = self.request("POST", path, body, **kw)
        return status, json.loads(data) if data.startswith(b"{") else data

    def metrics(self):
        status, _, data = self.request("GET", "/metrics")
        assert status == 200
        values = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                values[name] = float(value)
        return values


def sse_events(resp):
    """The data payloads of a server-sent-event response, until [DONE]."""
    events = []
    for raw in resp:
        line = raw.decode().rstrip("\r\n")
        if not line.startswith("data: "):
            continue
        payload = line[6:]
        if payload == "[DONE]":
            events.append(payload)
            break
        events.append(json.loads(payload))
    return events


def wait_for(predicate, timeout=30, interval=0.05):
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return True
        time.sleep(interval)
    return False


def raw_request(port, data, timeout=5, source="127.0.0.1"):
    """Sends raw bytes on a fresh connection from `source`; returns (status,
    headers, body, seconds to the answer). A connection closed without an
    answer raises ConnectionError; none within `timeout` raises TimeoutError."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                    source_address=(source, 0))
    try:
        started = time.time()
        sock.sendall(data)
        resp = http.client.HTTPResponse(sock, method=data.split(b" ", 1)[0].decode())
        try:
            resp.begin()
        except http.client.RemoteDisconnected as e:
            raise ConnectionError(str(e)) from e
        except socket.timeout as e:
            raise TimeoutError(f"no answer within {timeout} s") from e
        body = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body, \
            time.time() - started
    finally:
        sock.close()


def seconds_until_closed(sock, timeout):
    """How long until the server closes `sock` (end of file or a reset);
    None if it is still open after `timeout` seconds."""
    started = time.time()
    sock.settimeout(timeout)
    try:
        while sock.recv(4096):
            pass
    except socket.timeout:
        return None
    except ConnectionResetError:
        pass
    return time.time() - started
