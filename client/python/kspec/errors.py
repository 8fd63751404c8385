"""Errors of the kspec client.

Every failure that comes from the daemon or the connection is a
``KspecError`` carrying the wire code (``"E_BAD_SHAPE"``) and a one-line
message.  The codes are those of docs/protocol.md; programs switch on
``err.code``, the message is for people.
"""

__all__ = ["KspecError", "ERROR_CODES"]

# The wire codes and their values: base/base.h's KS_ERRNO_MAP, to which
# tests/python/test_client.py holds this table (and docs/protocol.md's).
# A code this table lacks is kept as sent.
ERROR_CODES = {
    "E_NOMEM": -1,
    "E_INVAL": -2,
    "E_BAD_FRAME": -3,
    "E_TOO_LARGE": -4,
    "E_BAD_JSON": -5,
    "E_BAD_REQUEST": -6,
    "E_UNKNOWN_OP": -7,
    "E_UNKNOWN_FIELD": -8,
    "E_DUPLICATE_KEY": -9,
    "E_UNKNOWN_KERNEL": -10,
    "E_BAD_SHAPE": -11,
    "E_BAD_DTYPE": -12,
    "E_BAD_BACKEND": -13,
    "E_BAD_TARGET": -14,
    "E_BAD_FORMAT": -15,
    "E_BAD_MODE": -16,
    "E_BACKEND_UNAVAILABLE": -17,
    "E_COMPILE": -18,
    "E_STORE": -19,
    "E_CORRUPT": -20,
    "E_IO": -21,
    "E_CONNECT": -22,
    "E_PROTO": -23,
    "E_SHUTTING_DOWN": -24,
    "E_BUSY": -25,
    "E_NOT_FOUND": -26,
    "E_TIMEOUT": -27,
    "E_INTERNAL": -28,
    "E_UNSUPPORTED": -29,
    "E_COMPILE_CRASHED": -30,
    "E_COMPILE_TIMEOUT": -31,
    "E_COMPILE_OOM": -32,
    "E_DENIED": -33,
    "E_CANCELLED": -34,
    "E_CANARY": -35,
    "E_BAD_KERNEL": -36,
}


class KspecError(Exception):
    """A request the daemon refused, or a failure of the connection.

    ``code`` is the wire code, e.g. ``"E_BAD_SHAPE"``; ``message`` the
    daemon's (or the client's) one-line reason; ``reply`` the daemon's
    whole reply header when there was one, else None.

    Codes produced by the client itself, never by the daemon:
    ``E_CONNECT`` (cannot connect, or the connection was lost),
    ``E_PROTO`` (a reply that breaks the protocol), ``E_TIMEOUT`` (no reply
    within the client's timeout), ``E_CORRUPT`` (the artifact failed its
    BLAKE2b-256 check; the daemon also uses this code).
    """

    def __init__(self, code, message="", reply=None):
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.reply = reply

    @property
    def errno(self):
        """The numeric value of the code (``-11`` for ``E_BAD_SHAPE``);
        ``-28`` (``E_INTERNAL``) for a code this client does not know."""
        return ERROR_CODES.get(self.code, ERROR_CODES["E_INTERNAL"])

    def __str__(self):
        return "%s: %s" % (self.code, self.message) if self.message \
            else self.code

    def __repr__(self):
        return "KspecError(%r, %r)" % (self.code, self.message)
