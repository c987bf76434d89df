#!/usr/bin/env python3
"""Event files written by Trainyard's TensorBoard writer, read by others.

Two readers, chosen with --reader:

  stdlib       always runs: a TFRecord reader written here with the standard
               library only (struct, and a bit-at-a-time CRC-32C), which
               checks both masked CRCs of every record, decodes the Event
               protobufs by hand and compares every step, wall time, tag and
               value exactly; also reads the metrics.jsonl written alongside.
  tensorboard  TensorBoard's own EventAccumulator (Scalars('loss') returns
               exactly the steps and values written, also while the writer
               is still open) and its protobuf classes (each record is byte
               for byte Event.SerializeToString() of the same event). Needs
               the `tensorboard` package; without it the test is SKIPPED:
               it says why on stderr and exits 77, which ctest reports as
               skipped, never as passed.

The events come from a small C driver (metrics_tool) fed with random
values; the seed is printed (replay with TY_TEST_SEED=<seed>).

    python3 tests/apps/metrics/test_tensorboard_events.py \
        --tool build/tests/metrics_tool --reader stdlib
"""
import argparse
import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile
import unittest

# 0, 1 or 77 (skipped) for ctest (tests/common/unittest_exit.py)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "common"))
import unittest_exit  # noqa: E402

TOOL = None
READER = None

# ---- a standard-library reader ---------------------------------------------


def crc32c(data):
    """CRC-32C by its definition, one bit at a time (slow, independent)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data):
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


class FormatError(Exception):
    pass


def read_records(data):
    """The payloads of a TFRecord file; FormatError on any CRC or framing
    problem, including a torn end."""
    records, offset = [], 0
    while offset < len(data):
        if len(data) - offset < 12:
            raise FormatError(f"torn header at byte {offset}")
        header = data[offset:offset + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[offset + 8:offset + 12])
        if length_crc != masked_crc32c(header):
            raise FormatError(f"record {len(records)}: bad length CRC")
        end = offset + 12 + length
        if end + 4 > len(data):
            raise FormatError(f"record {len(records)}: torn data")
        payload = data[offset + 12:end]
        (data_crc,) = struct.unpack("<I", data[end:end + 4])
        if data_crc != masked_crc32c(payload):
            raise FormatError(f"record {len(records)}: bad data CRC")
        records.append(payload)
        offset = end + 4
    return records


def read_varint(buf, pos):
    value, shift = 0, 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise FormatError("bad varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def read_fields(buf):
    """(field number, wire type, value) of a protobuf message: ints for
    varints, bytes for fixed64/fixed32/length-delimited."""
    pos, fields = 0, []
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        elif wire == 2:
            length, pos = read_varint(buf, pos)
            value, pos = buf[pos:pos + length], pos + length
        else:
            raise FormatError(f"wire type {wire}")
        if pos > len(buf):
            raise FormatError("field runs past the message")
        fields.append((field, wire, value))
    return fields


def decode_event(payload):
    """A dict with wall_time, step, file_version and values [(tag, float)]."""
    event = {"wall_time": 0.0, "step": 0, "file_version": None, "values": []}
    for field, wire, value in read_fields(payload):
        if (field, wire) == (1, 1):
            event["wall_time"] = struct.unpack("<d", value)[0]
        elif (field, wire) == (2, 0):
            event["step"] = value - (1 << 64) if value >= 1 << 63 else value
        elif (field, wire) == (3, 2):
            event["file_version"] = value.decode("utf-8")
        elif (field, wire) == (5, 2):
            for vfield, vwire, vvalue in read_fields(value):
                if (vfield, vwire) != (1, 2):
                    raise FormatError(f"Summary field {vfield}")
                tag, simple = None, None
                for f, w, v in read_fields(vvalue):
                    if (f, w) == (1, 2):
                        tag = v.decode("utf-8")
                    elif (f, w) == (2, 5):
                        simple = struct.unpack("<f", v)[0]
                    else:
                        raise FormatError(f"Value field {f}")
                event["values"].append((tag, simple))
        else:
            raise FormatError(f"Event field {field} (wire type {wire})")
    return event


# ---- the events written ----------------------------------------------------


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def make_events(rng, count=40):
    """Steps from 0 up (0 is left out of the encoding: proto3), a float32
    loss each step, and lr / grad_norm / tokens_per_s together every 5th."""
    events, wall = [], 1.7e9 + rng.random() * 1e7
    for step in range(count):
        wall += rng.random()
        scalars = {"loss": f32(10.0 * rng.random())}
        if step % 5 == 4:
            scalars = {"loss": scalars["loss"], "lr": f32(rng.uniform(1e-5, 1e-3)),
                       "grad_norm": f32(rng.uniform(0.1, 3.0)),
                       "tokens_per_s": f32(rng.uniform(1e3, 1e6))}
        events.append({"step": step, "wall_time": wall, "scalars": scalars})
    return events


class Writer:
    """metrics_tool as a child process, fed one event at a time."""

    def __init__(self, logdir, jsonl=None):
        args = [TOOL, logdir] + ([jsonl] if jsonl else [])
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"metrics_tool failed: {self.proc.stderr.read()}")
        self.path = json.loads(line)["path"]

    def write(self, event):
        self.proc.stdin.write(json.dumps(event) + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if answer != "ok\n":
            raise AssertionError(f"metrics_tool: {answer!r} {self.proc.stderr.read()}")

    def close(self):
        self.proc.stdin.close()
        rc = self.proc.wait()
        err = self.proc.stderr.read()
        self.proc.stdout.close()
        self.proc.stderr.close()
        if rc != 0:
            raise AssertionError(f"metrics_tool exited {rc}: {err}")


class EventsTestBase(unittest.TestCase):
    def setUp(self):
        seed = int(os.environ.get("TY_TEST_SEED", random.getrandbits(48)))
        print(f"seed {seed}", file=sys.stderr)
        self.rng = random.Random(seed)
        self.tmp = tempfile.TemporaryDirectory()
        self.logdir = os.path.join(self.tmp.name, "runs", "exp")
        self.events = make_events(self.rng)

    def tearDown(self):
        self.tmp.cleanup()


class StdlibReaderTest(EventsTestBase):
    def test_crc32c_reference(self):
        self.assertEqual(crc32c(b"123456789"), 0xE3069283)
        self.assertEqual(crc32c(bytes(32)), 0x8A9136AA)

    def test_events_read_back_exactly(self):
        jsonl = os.path.join(self.tmp.name, "metrics.jsonl")
        writer = Writer(self.logdir, jsonl)
        self.assertEqual(os.path.dirname(writer.path), self.logdir)
        name = os.path.basename(writer.path).split(".")
        self.assertEqual(name[:3], ["events", "out", "tfevents"])
        self.assertEqual(len(name[3]), 10)
        self.assertEqual(name[-2], str(writer.proc.pid))
        for i, event in enumerate(self.events):
            writer.write(event)
            # Visible at once, without closing: what `tensorboard --logdir` sees.
            with open(writer.path, "rb") as f:
                self.assertEqual(len(read_records(f.read())), 2 + i)
        writer.close()

        with open(writer.path, "rb") as f:
            data = f.read()
        decoded = [decode_event(r) for r in read_records(data)]
        self.assertEqual(decoded[0]["file_version"], "brain.Event:2")
        self.assertEqual(decoded[0]["values"], [])
        self.assertEqual(len(decoded), 1 + len(self.events))
        for want, got in zip(self.events, decoded[1:]):
            self.assertEqual(got["step"], want["step"])
            self.assertEqual(got["wall_time"], want["wall_time"])
            self.assertIsNone(got["file_version"])
            self.assertEqual(got["values"], list(want["scalars"].items()))

        # metrics.jsonl: the same values, as exact doubles, in order.
        with open(jsonl, encoding="utf-8") as f:
            lines = [json.loads(line, object_pairs_hook=list) for line in f]
        self.assertEqual(len(lines), len(self.events))
        for want, got in zip(self.events, lines):
            self.assertEqual(got, [("step", want["step"]), *want["scalars"].items()])

    def test_reader_catches_damage(self):
        """The checks above can fail: a flipped bit or a cut file is seen."""
        writer = Writer(self.logdir)
        for event in self.events[:3]:
            writer.write(event)
        writer.close()
        with open(writer.path, "rb") as f:
            data = f.read()
        self.assertEqual(len(read_records(data)), 4)
        for pos in (0, 9, 14, len(data) - 2):
            damaged = bytearray(data)
            damaged[pos] ^= 0x10
            with self.assertRaises(FormatError, msg=f"flip at {pos}"):
                read_records(bytes(damaged))
        with self.assertRaises(FormatError):
            read_records(data[:-1])


class TensorBoardTest(EventsTestBase):
    def accumulator(self):
        acc = EventAccumulator(self.logdir, size_guidance={"scalars": 0})
        acc.Reload()
        return acc

    def test_event_accumulator(self):
        writer = Writer(self.logdir)
        half = len(self.events) // 2
        for event in self.events[:half]:
            writer.write(event)
        # While the writer is still open, TensorBoard already sees every step.
        live = self.accumulator().Scalars("loss")
        self.assertEqual([s.step for s in live], [e["step"] for e in self.events[:half]])
        for event in self.events[half:]:
            writer.write(event)
        writer.close()

        acc = self.accumulator()
        self.assertEqual(sorted(acc.Tags()["scalars"]),
                         ["grad_norm", "loss", "lr", "tokens_per_s"])
        for tag in ("loss", "lr", "grad_norm", "tokens_per_s"):
            want = [(e["step"], e["wall_time"], e["scalars"][tag])
                    for e in self.events if tag in e["scalars"]]
            got = [(s.step, s.wall_time, s.value) for s in acc.Scalars(tag)]
            self.assertEqual(got, want, tag)

    def test_bytes_match_protobuf(self):
        writer = Writer(self.logdir)
        for event in self.events:
            writer.write(event)
        writer.close()
        # TensorBoard's own record reader (it checks the CRCs too).
        loaded = list(EventFileLoader(writer.path).Load())
        self.assertEqual(len(loaded), 1 + len(self.events))
        self.assertEqual(loaded[0].file_version, "brain.Event:2")
        with open(writer.path, "rb") as f:
            records = read_records(f.read())
        want = event_pb2.Event(wall_time=loaded[0].wall_time, file_version="brain.Event:2")
        self.assertEqual(records[0], want.SerializeToString())
        for event, record in zip(self.events, records[1:]):
            summary = summary_pb2.Summary(value=[
                summary_pb2.Summary.Value(tag=tag, simple_value=value)
                for tag, value in event["scalars"].items()])
            want = event_pb2.Event(wall_time=event["wall_time"], step=event["step"],
                                   summary=summary)
            self.assertEqual(record, want.SerializeToString(), f"step {event['step']}")


def main():
    global TOOL, READER, EventAccumulator, EventFileLoader, event_pb2, summary_pb2
    parser = argparse.ArgumentParser()
    parser.add_argument("--tool", required=True)
    parser.add_argument("--reader", choices=("stdlib", "tensorboard"), required=True)
    args, rest = parser.parse_known_args()
    TOOL = args.tool
    if args.reader == "tensorboard":
        try:
            import tensorboard
            from tensorboard.backend.event_processing.event_accumulator import (
                EventAccumulator)
            from tensorboard.backend.event_processing.event_file_loader import (
                EventFileLoader)
            from tensorboard.compat.proto import event_pb2, summary_pb2
        except ImportError as e:
            print(f"SKIPPED: the Python tensorboard package is not importable ({e}); "
                  f"install it with: python3 -m pip install tensorboard "
                  f"(scripts/install-deps.sh does)", file=sys.stderr)
            return 77
        print(f"tensorboard {tensorboard.__version__}", file=sys.stderr)
        case = TensorBoardTest
    else:
        case = StdlibReaderTest
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(case)
    if rest:
        suite = unittest.TestSuite(t for t in suite if t.id().split(".")[-1] in rest)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    return unittest_exit.exit_code(result)


if __name__ == "__main__":
    sys.exit(main())
