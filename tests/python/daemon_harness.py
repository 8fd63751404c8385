"""Starts a real kspecd on a temporary socket and store for the Python tests
(the same way as tests/e2e.h): ``$KSPEC_BUILD/kspecd --socket S --store D``.

KSPEC_BUILD is the build folder (absolute); without it, ``build/`` of this
checkout.  KSPEC_E2E_LOG=1 lets the daemon's log through to stderr.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))


def recv_exact(s, n):
    """N bytes from socket S; ConnectionError at end of stream."""
    buf = b""
    while len(buf) < n:
        r = s.recv(n - len(buf))
        if not r:
            raise ConnectionError("eof")
        buf += r
    return buf


def build_dir():
    b = os.environ.get("KSPEC_BUILD")
    return b if b else os.path.join(ROOT, "build")


class Daemon:
    def __init__(self, extra=()):
        self.extra = list(extra)
        self.dir = None
        self.proc = None

    @property
    def socket(self):
        return os.path.join(self.dir, "run", "kspecd.sock")

    @property
    def store(self):
        return os.path.join(self.dir, "store", "kspec.db")

    def start(self, timeout=30.0):
        binary = os.path.join(build_dir(), "kspecd")
        if not os.access(binary, os.X_OK):
            raise RuntimeError("%s not found: build it (make) or set "
                               "KSPEC_BUILD" % binary)
        if self.dir is None:
            self.dir = tempfile.mkdtemp(prefix="kspec-py-", dir="/tmp")
        err = None if os.environ.get("KSPEC_E2E_LOG") else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [binary, "--socket", self.socket, "--store", self.store] +
            self.extra, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=err)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("kspecd exited with status %d at start"
                                   % self.proc.returncode)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(self.socket)
                return self
            except OSError:
                time.sleep(0.01)
            finally:
                s.close()
        self.stop()
        raise RuntimeError("kspecd did not listen on %s within %g s"
                           % (self.socket, timeout))

    def stop(self):
        """SIGTERM, then waits (SIGKILL after 30 s); returns the status."""
        if self.proc is None:
            return None
        rc = self.proc.poll()
        if rc is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                rc = self.proc.wait()
        self.proc = None
        return rc

    def cleanup(self):
        self.stop()
        if self.dir and os.path.basename(self.dir).startswith("kspec-py-"):
            shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None
