"""Tests of the Python client (client/python/kspec) against a fake daemon
on a temporary socket, for replies kspecd never sends: a wrong hash, a
byte count that disagrees, replies to unknown ids, an oversized header,
no reply, a refusal before the close, a connection lost mid-reply.

Run from the repository root with the other Python tests:

    KSPEC_BUILD=$PWD/build /usr/bin/python3 tests/python/run.py
"""

import hashlib
import json
import os
import socket
import struct
import tempfile
import threading
import unittest

import daemon_harness               # puts client/python on sys.path
import kspec
from kspec import KspecError


class FakeServer:
    """Accepts one connection and runs HANDLER(conn) in a thread."""

    def __init__(self, handler):
        self.dir = tempfile.mkdtemp(prefix="kspec-py-fake-")
        self.path = os.path.join(self.dir, "fake.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(1)
        self.error = None
        self.thread = threading.Thread(target=self._run, args=(handler,),
                                       daemon=True)
        self.thread.start()

    def _run(self, handler):
        try:
            conn, _ = self.listener.accept()
            with conn:
                handler(conn)
        except Exception as e:          # reported by close()
            self.error = e

    def close(self):
        self.thread.join(10)
        self.listener.close()
        os.unlink(self.path)
        os.rmdir(self.dir)
        if self.error:
            raise self.error

    @staticmethod
    def read_request(conn):
        hl, pl = struct.unpack(">II", daemon_harness.recv_exact(conn, 8))
        assert pl == 0
        return json.loads(daemon_harness.recv_exact(conn, hl))

    @staticmethod
    def reply(conn, header, payload=b"", hlen=None):
        h = json.dumps(header).encode()
        conn.sendall(struct.pack(">II", len(h) if hlen is None else hlen,
                                 len(payload)) + h + payload)


FAKE = b"\x7fELF not really an artifact" * 10


def get_reply(rid, payload=FAKE, digest=None, **extra):
    h = {"id": rid, "ok": True, "key": "ab" * 32,
         "artifact": digest or hashlib.blake2b(payload,
                                               digest_size=32).hexdigest(),
         "source": "memory", "kernel": "gemm", "variant": "gemv_m1",
         "backend": "cpu", "format": "so", "entry": "ks_gemm_gemv_m1",
         "bytes": len(payload), "guard": {}, "params": [], "launch": {}}
    h.update(extra)
    return h


class FakeServerTest(unittest.TestCase):

    def serve(self, handler, **kw):
        srv = FakeServer(handler)
        self.addCleanup(srv.close)
        c = kspec.Client(srv.path, **kw)
        self.addCleanup(c.close)
        return c

    def test_wrong_hash_is_E_CORRUPT(self):
        def handler(conn):
            r = FakeServer.read_request(conn)
            FakeServer.reply(conn, get_reply(r["id"]), FAKE)   # control
            r = FakeServer.read_request(conn)
            FakeServer.reply(conn, get_reply(r["id"], digest="00" * 32),
                             FAKE)
            r = FakeServer.read_request(conn)
            flipped = bytes([FAKE[0] ^ 1]) + FAKE[1:]
            FakeServer.reply(conn, get_reply(r["id"]), flipped[:-1] + b"?")
            r = FakeServer.read_request(conn)
            FakeServer.reply(conn, {"id": r["id"], "ok": True, "pong": True})

        c = self.serve(handler)
        art = c.get("gemm", dtype="f32", shape={"M": 1})
        self.assertEqual(art.bytes, FAKE)
        for _ in range(2):
            with self.assertRaises(KspecError) as cm:
                c.get("gemm", dtype="f32", shape={"M": 1})
            self.assertEqual(cm.exception.code, "E_CORRUPT")
            self.assertEqual(cm.exception.errno, -20)
        self.assertTrue(c.ping()["pong"])        # connection still usable

    def test_byte_count_mismatch_is_E_PROTO(self):
        def handler(conn):
            r = FakeServer.read_request(conn)
            FakeServer.reply(conn, get_reply(r["id"], bytes=5), FAKE)

        c = self.serve(handler)
        with self.assertRaises(KspecError) as cm:
            c.get("gemm", dtype="f32", shape={"M": 1})
        self.assertEqual(cm.exception.code, "E_PROTO")

    def test_get_many_matches_reversed_replies(self):
        n = 6
        payloads = [FAKE + bytes([i]) for i in range(n)]

        def handler(conn):
            reqs = [FakeServer.read_request(conn) for _ in range(n)]
            for i, r in reversed(list(enumerate(reqs))):
                if i == 2:
                    FakeServer.reply(conn, {"id": r["id"], "ok": False,
                                            "error": {"code": "E_BAD_SHAPE",
                                                      "message": "two"}})
                elif i == 4:
                    FakeServer.reply(conn, get_reply(r["id"], payloads[i],
                                                     digest="11" * 32),
                                     payloads[i])
                else:
                    FakeServer.reply(conn, get_reply(
                        r["id"], payloads[i], guard={"N": r["shape"]["N"]}),
                        payloads[i])

        c = self.serve(handler)
        specs = [{"kernel": "gemm", "dtype": "f32", "shape": {"N": i}}
                 for i in range(n)]
        res = c.get_many(specs, return_exceptions=True)
        self.assertEqual(c.last_completion_order, list(reversed(range(n))))
        for i, r in enumerate(res):
            if i == 2:
                self.assertEqual((r.code, r.message), ("E_BAD_SHAPE", "two"))
            elif i == 4:
                self.assertEqual(r.code, "E_CORRUPT")
            else:
                self.assertEqual(r.bytes, payloads[i])
                self.assertEqual(r.guard, {"N": i})

    def test_reply_to_an_unknown_id_is_E_PROTO(self):
        def handler(conn):
            r = FakeServer.read_request(conn)
            FakeServer.reply(conn, {"id": r["id"] + 1000, "ok": True})

        c = self.serve(handler)
        with self.assertRaises(KspecError) as cm:
            c.ping()
        self.assertEqual(cm.exception.code, "E_PROTO")
        self.assertTrue(c.closed)

    def test_oversized_reply_header_is_E_PROTO(self):
        def handler(conn):
            FakeServer.read_request(conn)
            FakeServer.reply(conn, {"ok": True}, hlen=(16 << 20) + 1)

        c = self.serve(handler)
        with self.assertRaises(KspecError) as cm:
            c.ping()
        self.assertEqual(cm.exception.code, "E_PROTO")

    def test_no_reply_within_the_timeout_is_E_TIMEOUT(self):
        done = threading.Event()

        def handler(conn):
            FakeServer.read_request(conn)
            done.wait(10)

        c = self.serve(handler, timeout=0.2)
        with self.assertRaises(KspecError) as cm:
            c.ping()
        done.set()
        self.assertEqual(cm.exception.code, "E_TIMEOUT")
        self.assertTrue(c.closed)

    def test_refusal_sent_before_close_is_read_after_a_failed_send(self):
        def handler(conn):                  # as kspecd refuses a peer
            FakeServer.reply(conn, {"ok": False, "error": {
                "code": "E_DENIED", "message": "uid 1234 may not use it"}})

        srv = FakeServer(handler)
        self.addCleanup(srv.close)
        c = kspec.Client(srv.path)
        self.addCleanup(c.close)
        srv.thread.join(10)                 # written, and the end closed
        with self.assertRaises(KspecError) as cm:
            c.ping()                        # its send fails: EPIPE
        self.assertEqual(cm.exception.code, "E_DENIED")
        self.assertIn("uid 1234 may not use it", cm.exception.message)

    def test_connection_lost_mid_reply_is_E_CONNECT(self):
        def handler(conn):
            r = FakeServer.read_request(conn)
            h = json.dumps(get_reply(r["id"])).encode()
            conn.sendall(struct.pack(">II", len(h), len(FAKE)) + h + FAKE[:9])

        c = self.serve(handler)
        with self.assertRaises(KspecError) as cm:
            c.get("gemm", dtype="f32", shape={"M": 1})
        self.assertEqual(cm.exception.code, "E_CONNECT")
        self.assertIn("lost connection to %s" % c.path, cm.exception.message)


# ---------------------------------------------------------------------------
# The ops the daemon is gaining (docs/protocol.md): run where it has them.
# ---------------------------------------------------------------------------
