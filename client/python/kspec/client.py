"""The kspec wire protocol v1 (docs/protocol.md) over a Unix socket.

A ``Client`` holds one connection.  Requests and replies are frames::

    u32 header_len (big-endian) | u32 payload_len (big-endian)
    | header: UTF-8 JSON object | payload: raw bytes

Requests carry a fresh ``id``; replies come in completion order and are
matched by it, so ``get_many`` can keep many requests in flight on the one
connection.

Threads: a Client is used by one thread at a time (calls must not overlap;
hand it between threads with your own lock or queue).  Different clients
are independent.
"""

import collections
import collections.abc
import hashlib
import json
import os
import select
import socket
import stat
import struct

from .errors import KspecError

__all__ = ["Client", "Artifact", "Reply", "default_socket_path",
           "get_request"]

PROTOCOL_VERSION = 1

# Limits of docs/protocol.md.
MAX_HEADER = 65536                  # request header bytes (KS_MAX_HEADER)
MAX_REPLY_HEADER = 16 << 20         # KS_MAX_REPLY_HEADER
MAX_REPLY_PAYLOAD = 1 << 30         # KS_MAX_REPLY_PAYLOAD
MAX_ID = 1 << 53                    # ids are exact in a double

# Requests get_many keeps in flight at once.  The daemon refuses more than
# 256 requests waiting on compiles per connection (E_BUSY); 128 stays well
# below that, and 128 small request frames always fit in the socket's send
# buffer, so sending never blocks on a daemon that waits for us to read.
DEFAULT_WINDOW = 128

# Items of one warm request (the daemon's limit).
WARM_BATCH = 256

_PREFIX = struct.Struct(">II")
_READ_CHUNK = 256 << 10

# The fields of a get-spec, in the order they are sent.
_SPEC_FIELDS = ("kernel", "backend", "target", "format", "dtype", "mode",
                "shape", "dynamic")

Reply = collections.namedtuple("Reply", "header payload")
Reply.__doc__ = """A raw reply: the header (a dict, verbatim) and the payload
(bytes, empty when the reply has none)."""


SYSTEM_SOCKET = "/run/kspec/kspecd.sock"


def default_socket_path(environ=None):
    """The daemon's socket, in the order of docs/cli.md ("Socket") and of
    libkspec's ``kspec_default_socket`` (a test holds the two together):
    ``$KSPEC_SOCKET`` when set and
    non-empty, else ``$XDG_RUNTIME_DIR/kspec/kspecd.sock`` when
    ``XDG_RUNTIME_DIR`` is set and non-empty, else
    ``/tmp/kspec-$UID/kspecd.sock``; when that per-user path does not exist
    and ``/run/kspec/kspecd.sock`` (a daemon run as a system service) is a
    socket, that one."""
    env = os.environ if environ is None else environ
    path = env.get("KSPEC_SOCKET")
    if path:
        return path
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime:
        path = runtime + "/kspec/kspecd.sock"
    else:
        path = "/tmp/kspec-%d/kspecd.sock" % os.getuid()
    if not os.path.lexists(path):
        try:
            if stat.S_ISSOCK(os.stat(SYSTEM_SOCKET).st_mode):
                return SYSTEM_SOCKET
        except OSError:
            pass
    return path


def _denied(path):
    """Why connecting to PATH was refused, for people: the group the socket
    (or its directory) is open to, and how to join it."""
    what, st = "socket", None
    try:
        st = os.stat(path)
    except OSError:
        what = "socket's directory"
        try:
            st = os.stat(os.path.dirname(path) or ".")
        except OSError:
            return "cannot connect to %s: permission denied" % path
    if not st.st_mode & 0o070:
        return ("cannot connect to %s: permission denied: the %s is private "
                "to uid %d (kspecd admits other users with --socket-group "
                "GROUP)" % (path, what, st.st_uid))
    try:
        import grp
        group = grp.getgrgid(st.st_gid).gr_name
    except (ImportError, KeyError):
        group = str(st.st_gid)
    return ("cannot connect to %s: permission denied: the %s is open to "
            "group %s only; ask to be added to it (usermod -aG %s USER), "
            "then log in again" % (path, what, group, group))


def _dynamic_list(dynamic):
    if dynamic is None:
        return []
    if isinstance(dynamic, str):
        return [d.strip() for d in dynamic.split(",") if d.strip()]
    return list(dynamic)


def get_request(spec=None, with_return=True, **fields):
    """The wire form (a dict without ``op`` and ``id``) of a get-spec.

    SPEC is a mapping with the keyword arguments of ``Client.get``
    (``kernel``, ``backend``, ``dtype``, ``shape``, ``dynamic``,
    ``target``, ``format``, ``mode``, ``meta_only``); wire names
    (``"return": "meta"``) are accepted too.  FIELDS add to or override
    SPEC.  Defaults are those of ``Client.get``: backend ``cpu``, target
    ``auto``, mode ``exact``, no dynamic dims, the backend's default
    format.  Fields this client does not know are sent as given, so the
    daemon answers a typo with ``E_UNKNOWN_FIELD`` naming it.
    """
    if spec is None:
        spec = {}
    elif not isinstance(spec, collections.abc.Mapping):
        raise TypeError("a get-spec is a mapping (dict), not %s"
                        % type(spec).__name__)
    d = dict(spec)
    d.update(fields)
    for reserved in ("op", "id"):
        if reserved in d:
            raise ValueError("a get-spec must not contain %r; the client "
                             "sets it" % reserved)
    meta_only = d.pop("meta_only", False)
    out = {"kernel": d.pop("kernel", None),
           "backend": d.pop("backend", "cpu"),
           "target": d.pop("target", "auto")}
    fmt = d.pop("format", None)
    if fmt is not None:
        out["format"] = fmt
    out["dtype"] = d.pop("dtype", None)
    out["mode"] = d.pop("mode", "exact")
    shape = d.pop("shape", None)
    if shape is not None and not isinstance(shape, collections.abc.Mapping):
        raise TypeError("shape is a mapping of dim names to values, such "
                        "as {\"M\": 1, \"N\": 8, \"K\": 8}, not %s %r"
                        % (type(shape).__name__, shape))
    out["shape"] = dict(shape) if shape is not None else {}
    out["dynamic"] = _dynamic_list(d.pop("dynamic", None))
    ret = d.pop("return", None)
    if with_return:
        if ret is None:
            ret = "meta" if meta_only else "artifact"
        out["return"] = ret
    # Required fields left out are omitted, so the daemon names them.
    for name in ("kernel", "dtype"):
        if out[name] is None:
            del out[name]
    out.update(d)
    return out


class Artifact:
    """A get reply: ``bytes`` (the artifact, verified against its BLAKE2b-256
    hash; None when asked with ``meta_only``) and ``meta`` (the reply
    header, a dict, verbatim).  The properties read fields of ``meta``; a
    field the reply lacks reads as None."""

    __slots__ = ("bytes", "meta")

    def __init__(self, data, meta):
        self.bytes = data
        self.meta = meta

    # Property -> the get reply's field: every field of proto/reply.def
    # past ok and id (tests/docscheck.py holds the two together).
    FIELDS = {
        "source": "source", "key": "key", "artifact_hash": "artifact",
        "kernel": "kernel", "variant": "variant", "backend": "backend",
        "target": "target", "dtype": "dtype", "wdtype": "wdtype",
        "mode": "mode", "format": "format", "entry": "entry",
        "size": "bytes", "guard": "guard", "dynamic": "dynamic",
        "params": "params", "launch": "launch", "codegen": "codegen",
        "compile_ms": "compile_ms", "compiler": "compiler",
    }

    def __len__(self):
        return len(self.bytes) if self.bytes is not None else 0

    def __bytes__(self):
        return bytes(self.bytes) if self.bytes is not None else b""

    def __repr__(self):
        return ("<kspec.Artifact %s/%s variant=%s source=%s %s bytes "
                "key=%s>" % (self.kernel, self.backend, self.variant,
                             self.source, self.size,
                             (self.key or "")[:12]))

    def save(self, path):
        """Writes the bytes to PATH through ``PATH.tmp`` and a rename, so
        PATH is never a torn artifact."""
        if self.bytes is None:
            raise ValueError("artifact was fetched with meta_only: no bytes")
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(self.bytes)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def load(self):
        """The loader of this artifact's backend: ``kspec.load_cpu``,
        ``kspec.load_opencl`` or ``kspec.load_cuda`` (their defaults)."""
        if self.backend == "opencl":
            from .loader_opencl import load_opencl
            return load_opencl(self)
        if self.backend == "cuda":
            from .loader_cuda import load_cuda
            return load_cuda(self)
        from .loader import load_cpu
        return load_cpu(self)


def _reply_field(name):
    return property(lambda self: self.meta.get(name),
                    doc="The reply's %r field." % name)


for _prop, _name in Artifact.FIELDS.items():
    setattr(Artifact, _prop, _reply_field(_name))
del _prop, _name


def _reply_error(header):
    err = header.get("error")
    if isinstance(err, dict) and isinstance(err.get("code"), str):
        msg = err.get("message")
        return KspecError(err["code"], msg if isinstance(msg, str) else "",
                          header)
    return KspecError("E_PROTO", "error reply without an error code", header)


def _check_ok(header):
    ok = header.get("ok")
    if ok is True:
        return None
    if ok is False:
        return _reply_error(header)
    return KspecError("E_PROTO", "reply without a boolean \"ok\"", header)


def artifact_from_reply(header, payload, meta_only=False):
    """An Artifact from a successful get reply, after checking the payload
    against the reply's ``artifact`` hash (``E_CORRUPT`` when they differ)
    and its ``bytes`` count (``E_PROTO``)."""
    if meta_only and not payload:
        return Artifact(None, header)
    want = header.get("artifact")
    if not isinstance(want, str):
        raise KspecError("E_PROTO", "get reply without an \"artifact\" hash",
                         header)
    got = hashlib.blake2b(payload, digest_size=32).hexdigest()
    if got != want.lower():
        raise KspecError("E_CORRUPT", "artifact %s of %d bytes hashes to "
                         "%s" % (want[:64], len(payload), got), header)
    size = header.get("bytes")
    if size is not None and size != len(payload):
        raise KspecError("E_PROTO", "reply says %r bytes, payload has %d"
                         % (size, len(payload)), header)
    return Artifact(bytes(payload), header)


class Client:
    """One connection to kspecd.

    PATH is the daemon's socket (None: ``default_socket_path()``); TIMEOUT
    the longest wait in seconds for any read or write on the socket (None:
    wait as long as it takes; a cold compile may take seconds).  Connects at
    once: ``KspecError("E_CONNECT")`` when nobody listens.

    After a failure of the connection itself (``E_CONNECT``, ``E_TIMEOUT``,
    or an ``E_PROTO`` that leaves the stream out of step) the connection is
    closed and later calls raise ``E_CONNECT`` until ``reconnect()``.
    After any other error it stays usable.

    Use it as a context manager, or call ``close()``.  One thread at a time.
    """

    def __init__(self, path=None, timeout=None):
        self.path = path if path is not None else default_socket_path()
        self.timeout = timeout
        self._sock = None
        self._rbuf = bytearray()
        self._rpos = 0
        self._scratch = memoryview(bytearray(_READ_CHUNK))
        self._next_id = 1
        self._outstanding = set()
        self._early = collections.OrderedDict()
        self._ops = {}
        #: The spec indexes of the last get_many, in the order their replies
        #: arrived (completion order).
        self.last_completion_order = []
        self.connect()

    # ---- connection ----

    def connect(self):
        """Opens the connection (closing any open one)."""
        self.close()
        if not self.path:
            raise KspecError("E_CONNECT", "empty socket path")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.path)
        except PermissionError:
            sock.close()
            raise KspecError("E_DENIED", _denied(self.path)) from None
        except OSError as e:
            sock.close()
            reason = e.strerror or str(e)
            if isinstance(e, socket.timeout):
                reason = "timed out"
            raise KspecError("E_CONNECT", "cannot connect to %s: %s \u2014 "
                             "is kspecd running?" % (self.path, reason)) \
                from None
        self._sock = sock

    reconnect = connect

    def close(self):
        """Closes the connection; replies not yet read are lost."""
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None
        self._rbuf = bytearray()
        self._rpos = 0
        self._outstanding.clear()
        self._early.clear()
        self._ops.clear()

    @property
    def closed(self):
        return self._sock is None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "<kspec.Client %s%s>" % (self.path,
                                        " closed" if self.closed else "")

    def _fail(self, code, message):
        self.close()
        raise KspecError(code, message)

    def _lost(self, e):
        if isinstance(e, socket.timeout):
            self._fail("E_TIMEOUT", "no answer from %s within %g s"
                       % (self.path, self.timeout))
        self._fail("E_CONNECT", "lost connection to %s: %s"
                   % (self.path, e.strerror or e))

    def _need_open(self):
        if self._sock is None:
            raise KspecError("E_CONNECT", "connection to %s is closed"
                             % self.path)

    # ---- frames ----

    def send_frame(self, header, payload=b""):
        """Sends one frame as given: HEADER (bytes) and PAYLOAD.  No checks;
        for tests of the daemon's frame handling."""
        self._send_frames((), (_PREFIX.pack(len(header), len(payload)) +
                               bytes(header) + bytes(payload),))

    def _recv_exact(self, n):
        """N bytes from the socket, through a read buffer (one recv() often
        brings several replies of a pipeline); a large payload is read
        straight into its own buffer."""
        buf = self._rbuf
        avail = len(buf) - self._rpos
        if avail < n and n > _READ_CHUNK:
            out = bytearray(n)
            out[:avail] = buf[self._rpos:]
            self._rbuf = bytearray()
            self._rpos = 0
            view = memoryview(out)
            got = avail
            while got < n:
                got += self._recv_some(view[got:])
            return out
        while len(buf) - self._rpos < n:
            if self._rpos:
                del buf[:self._rpos]
                self._rpos = 0
            buf += self._scratch[:self._recv_some(self._scratch)]
        out = buf[self._rpos:self._rpos + n]
        self._rpos += n
        return out

    def _recv_some(self, view):
        try:
            r = self._sock.recv_into(view)
        except OSError as e:
            self._lost(e)
        if r == 0:
            self._fail("E_CONNECT", "lost connection to %s: the daemon "
                       "closed the connection" % self.path)
        return r

    def _read_frame(self):
        self._need_open()
        try:
            return self._read_frame_unguarded()
        except KspecError:
            raise
        except BaseException:
            # Interrupted inside a frame (KeyboardInterrupt, MemoryError):
            # the stream is out of step, so the connection cannot be used.
            self.close()
            raise

    def _read_frame_unguarded(self):
        hlen, plen = _PREFIX.unpack(self._recv_exact(8))
        if not 1 <= hlen <= MAX_REPLY_HEADER:
            self._fail("E_PROTO", "reply header length %d out of range"
                       % hlen)
        if plen > MAX_REPLY_PAYLOAD:
            self._fail("E_PROTO", "reply payload length %d over the limit"
                       % plen)
        raw = self._recv_exact(hlen)
        try:
            header = json.loads(raw.decode("utf-8"))
        except ValueError as e:
            self._fail("E_PROTO", "reply header is not JSON: %s" % e)
        if not isinstance(header, dict):
            self._fail("E_PROTO", "reply header is not a JSON object")
        payload = bytes(self._recv_exact(plen)) if plen else b""
        return Reply(header, payload)

    # ---- requests ----

    def _new_id(self):
        i = self._next_id
        self._next_id = 1 if i >= MAX_ID else i + 1
        return i

    def _encode(self, msg):
        """(id, frame bytes) of request MSG; an id is added when it has
        none."""
        if not isinstance(msg, collections.abc.Mapping):
            raise TypeError("a request is a mapping (dict)")
        out = {}
        if "op" in msg:
            out["op"] = msg["op"]
        rid = msg["id"] if "id" in msg else self._new_id()
        out["id"] = rid
        for k, v in msg.items():
            if k not in ("op", "id"):
                out[k] = v
        data = json.dumps(out, separators=(",", ":"),
                          allow_nan=False).encode("ascii")
        if len(data) > MAX_HEADER:
            raise KspecError("E_TOO_LARGE", "request header of %d bytes "
                             "exceeds %d" % (len(data), MAX_HEADER))
        return rid, _PREFIX.pack(len(data), 0) + data

    def _reopen_if_closed(self):
        """kspecd closes a connection that stays idle (--idle-timeout):
        with nothing outstanding, a connection the daemon has closed is
        opened again before the next request."""
        if self._outstanding or self._early or self._rpos < len(self._rbuf):
            return
        try:
            r, _, _ = select.select([self._sock], [], [], 0)
            if not r or self._sock.recv(1, socket.MSG_PEEK |
                                        socket.MSG_DONTWAIT):
                return          # nothing, or bytes to read as a reply
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            pass
        self.connect()

    def _send_frames(self, rids, frames):
        self._need_open()
        self._reopen_if_closed()
        try:
            self._sock.sendall(b"".join(frames))
        except (BrokenPipeError, ConnectionResetError):
            # The daemon closed its end, maybe after saying why (a refused
            # peer is told so first): the reply read finds that, or the
            # end of the stream.
            pass
        except OSError as e:
            self._lost(e)
        except BaseException:
            self.close()                # a frame may be half written
            raise
        for rid in rids:
            if isinstance(rid, int) and not isinstance(rid, bool):
                self._outstanding.add(rid)

    def send(self, msg):
        """Sends request MSG (a dict with ``op``).  An ``id`` is added when
        MSG has none; returns the id.  The reply is read with ``recv()``
        (or ``request()`` does both)."""
        rid, frame = self._encode(msg)
        self._send_frames((rid,), (frame,))
        return rid

    def recv(self):
        """The next reply, as a ``Reply(header, payload)``, whatever request
        it answers (replies come in completion order).  Error replies are
        returned, not raised."""
        if self._early:
            return self._early.popitem(last=False)[1]
        r = self._read_frame()
        self._outstanding.discard(r.header.get("id"))
        return r

    def _recv_for(self, want):
        """The reply to one of the ids in WANT (a set): returns (id, Reply).
        Replies to other outstanding ids are kept for later."""
        for rid in list(self._early):
            if rid in want:
                return rid, self._early.pop(rid)
        while True:
            r = self._read_frame()
            rid = r.header.get("id")
            if rid is None:
                # Only replies to unreadable requests and frame errors
                # lack an id; with one request in flight it is its reply.
                pending = want | self._outstanding
                if len(pending) == 1:
                    rid = next(iter(pending))
                else:
                    err = _check_ok(r.header)
                    self._fail("E_PROTO", "reply without id while %d "
                               "requests are in flight%s" % (
                                   len(pending),
                                   " (%s)" % err if err else ""))
            if rid in want:
                self._outstanding.discard(rid)
                return rid, r
            if rid in self._outstanding:
                self._outstanding.discard(rid)
                self._early[rid] = r
                continue
            self._fail("E_PROTO", "reply to id %r, which no request has"
                       % (rid,))

    def request(self, msg):
        """Sends MSG, waits for its reply and returns the header (a dict,
        verbatim); raises ``KspecError`` with the daemon's code and message
        when the reply is an error.  Any op, any fields: the daemon
        validates them."""
        rid = self.send(msg)
        _, r = self._recv_for({rid})
        err = _check_ok(r.header)
        if err:
            raise err
        return r.header

    # ---- ops ----

    def ping(self):
        """``{"op":"ping"}``; returns the reply (``{"id":..,"ok":true,
        "pong":true}``)."""
        return self.request({"op": "ping"})

    def hello(self):
        """Protocol version, server version, backends, kernels."""
        return self.request({"op": "hello"})

    def stats(self):
        """The daemon's counters (docs/protocol.md, stats)."""
        return self.request({"op": "stats"})

    def get(self, kernel, backend="cpu", dtype=None, shape=None, dynamic=(),
            target="auto", format=None, mode="exact", meta_only=False,
            deployment=None, wdtype=None):
        """Asks for the artifact of KERNEL specialized for SHAPE (a dict of
        constants; DYNAMIC names the parameters left dynamic).  Returns an
        ``Artifact`` whose bytes were checked against the reply's hash;
        raises ``KspecError`` with the daemon's code on refusal.
        WDTYPE gives the kernel's weights their own dtype where it takes
        one (gemm's and gemm_packed's W, the norms' w: f16 or bf16 beside
        f32; docs/kernels.md, "Mixed precision"); it is part of the key.
        DEPLOYMENT names the deployment the get is for (not part of the
        key): a compile after that deployment was ready is counted late.
        In ``get_many`` a spec may carry ``"wdtype"`` and ``"deployment"``
        too."""
        extra = {"deployment": deployment} if deployment else {}
        if wdtype is not None:
            extra["wdtype"] = wdtype
        req = get_request(kernel=kernel, backend=backend, dtype=dtype,
                          shape=shape, dynamic=dynamic, target=target,
                          format=format, mode=mode, meta_only=meta_only,
                          **extra)
        req = dict(req, op="get")
        rid = self.send(req)
        _, r = self._recv_for({rid})
        err = _check_ok(r.header)
        if err:
            raise err
        return artifact_from_reply(r.header, r.payload,
                                   req.get("return") == "meta")

    def get_many(self, specs, return_exceptions=False, window=DEFAULT_WINDOW,
                 on_reply=None):
        """Gets every spec of SPECS (mappings with the keyword arguments of
        ``get``), pipelined on this connection: requests go out with
        distinct ids, up to WINDOW in flight; replies are read in
        completion order and matched by id.  Returns the results in the
        order of SPECS.

        A spec the daemon refuses (or whose artifact fails its hash) gives a
        ``KspecError`` in the result list when RETURN_EXCEPTIONS is true;
        otherwise every reply is still read (the connection stays in step)
        and then the error of the first failing spec, in SPECS order, is
        raised.  A failure of the connection raises at once.

        ON_REPLY(index, header), when given, is called for each reply as it
        arrives; ``last_completion_order`` lists the spec indexes in arrival
        order afterwards.
        """
        reqs = [dict(get_request(s), op="get") for s in specs]
        if window < 1:
            raise ValueError("window must be at least 1")
        self._need_open()
        results = [None] * len(reqs)
        order = []
        self.last_completion_order = order
        inflight = {}
        nxt = 0
        while nxt < len(reqs) or inflight:
            rids, frames = [], []
            while nxt < len(reqs) and len(inflight) < window:
                rid, frame = self._encode(reqs[nxt])
                inflight[rid] = nxt
                rids.append(rid)
                frames.append(frame)
                nxt += 1
            if frames:                  # one write for the whole batch
                self._send_frames(rids, frames)
            rid, r = self._recv_for(set(inflight))
            i = inflight.pop(rid)
            order.append(i)
            if on_reply is not None:
                on_reply(i, r.header)
            err = _check_ok(r.header)
            if err is None:
                try:
                    results[i] = artifact_from_reply(
                        r.header, r.payload, reqs[i].get("return") == "meta")
                except KspecError as e:
                    results[i] = e
            else:
                results[i] = err
        if not return_exceptions:
            for res in results:
                if isinstance(res, KspecError):
                    raise res
        return results

    def supports(self, op):
        """Whether the daemon knows OP: asks with a field no op defines, so
        nothing runs; ``E_UNKNOWN_OP`` means no.  Cached per connection."""
        if op not in self._ops:
            try:
                self.request({"op": op, "kspec_probe_unknown_field": 1})
                known = True
            except KspecError as e:
                if e.code in ("E_CONNECT", "E_PROTO", "E_TIMEOUT"):
                    raise
                known = e.code != "E_UNKNOWN_OP"
            self._ops[op] = known
        return self._ops[op]

    @staticmethod
    def _fields(fields):
        return {k: v for k, v in fields.items() if v is not None}

    def kernels(self):
        """The kernel library: ``kernels``, an array of ``{name, summary,
        version, dims, dtypes, variants[{name, guard}]}``.  Returns the
        reply."""
        return self.request({"op": "kernels"})

    def list(self, kernel=None, backend=None, target=None, offset=None,
             limit=None):
        """One page of the store's entries (``op: list``), filtered by exact
        KERNEL, BACKEND, TARGET; OFFSET (default 0) and LIMIT (1..1000,
        default 100).  Returns the reply: ``entries``, ``total``,
        ``offset``, ``limit``.  ``entries()`` walks every page."""
        return self.request(dict(self._fields(dict(
            kernel=kernel, backend=backend, target=target, offset=offset,
            limit=limit)), op="list"))

    def entries(self, kernel=None, backend=None, target=None, page=1000):
        """Every entry of the store matching the filters, page by page (a
        generator of the ``entries`` items of ``list``)."""
        offset = 0
        while True:
            r = self.list(kernel=kernel, backend=backend, target=target,
                          offset=offset, limit=page)
            got = r.get("entries") or []
            yield from got
            offset += len(got)
            if not got or offset >= r.get("total", 0):
                return

    def evict(self, key=None, all=False, kernel=None, backend=None,
              target=None, stale=False, dry_run=False):
        """Removes entries from the store and the memory tier: by KEY, by a
        filter (KERNEL, BACKEND, TARGET, combined with and), ALL, or the
        STALE ones no request can reach any more (DRY_RUN: only list
        them).  The daemon wants exactly one of the four.  Returns the reply
        (``evicted``: how many were removed; with STALE also ``bytes``,
        ``unchecked`` and the ``entries`` found, docs/protocol.md)."""
        req = self._fields(dict(key=key, kernel=kernel, backend=backend,
                                target=target))
        if all:
            req["all"] = True
        if stale:
            req["stale"] = True
        if dry_run:
            req["dry_run"] = True
        return self.request(dict(req, op="evict"))

    def explain(self, spec=None, **fields):
        """For a get-spec (a mapping, or the keyword arguments of ``get``):
        the key, variant, guard, every key component, ``cached`` and, for a
        miss, the ``nearest`` stored entry and the components that differ.
        Nothing is compiled.  Returns the reply."""
        req = get_request(spec, with_return=False, **fields)
        return self.request(dict(req, op="explain"))

    def misses(self):
        """Every distinct get that missed on the daemon's store: ``misses``,
        ``[{spec, first_ms, last_ms, count}]``.  Returns the reply."""
        return self.request({"op": "misses"})

    def warm(self, specs, batch=WARM_BATCH):
        """Compiles what is missing of SPECS (get-specs, as for
        ``get_many``) at lower priority than any get, and waits until every
        item is done.  Returns ``{"ok": true, "items": [{index, ok, key,
        variant, source} or {index, ok: false, error}], "summary": {total,
        cached, compiled, joined, failed, cancelled}}``: the reply of the
        daemon's ``warm`` op, with SPECS sent in requests of at most BATCH
        items (the daemon takes 256) and their reports merged, indexes
        counting from the first spec.  Items that fail do not raise; check ``ok`` per
        item or ``summary["failed"]``."""
        items = [get_request(s, with_return=False) for s in specs]
        if not 1 <= batch <= WARM_BATCH:
            raise ValueError("batch must be 1..%d" % WARM_BATCH)
        out = {"ok": True, "items": [],
               "summary": {"total": 0, "cached": 0, "compiled": 0,
                           "joined": 0, "failed": 0, "cancelled": 0}}
        for start in range(0, len(items), batch):
            r = self.request({"op": "warm",
                              "items": items[start:start + batch]})
            for it in r.get("items") or []:
                it = dict(it)
                if isinstance(it.get("index"), int):
                    it["index"] += start
                out["items"].append(it)
            for k, v in (r.get("summary") or {}).items():
                if isinstance(v, (int, float)):
                    out["summary"][k] = out["summary"].get(k, 0) + v
        return out
