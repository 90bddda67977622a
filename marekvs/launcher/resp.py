"""A tiny raw RESP2 client for the launcher (PING, INFO, DBSIZE, DEBUG DIGEST): the
launcher needs nothing beyond the standard library. A node of a TLS cluster (``cluster up
--tls``) is reached over TLS with the cluster's client certificate (``client_context``)."""

from __future__ import annotations

import os
import socket
import ssl
from typing import Any


HOST = "127.0.0.1"


class RespError(Exception):
    """An error reply (``-ERR ...``)."""


class Resp:
    """Blocking RESP2 client: ``Resp(port).call("PING")`` -> "PONG"."""

    def __init__(self, port: int, host: str = HOST, timeout: float = 2.0, tls_dir: str = ""):
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls_dir:
            try:
                sock = client_context(tls_dir).wrap_socket(sock, server_hostname=host)
            except (OSError, ValueError):
                sock.close()
                raise
        self.sock = sock
        self.rf = self.sock.makefile("rb")

    @staticmethod
    def encode(*args: Any) -> bytes:
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        return b"".join(out)

    def _read(self) -> Any:
        line = self.rf.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("connection closed by the server")
        t, rest = line[:1], line[1:-2]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            return RespError(rest.decode(errors="replace"))
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.rf.read(n + 2)
            if len(data) != n + 2:
                raise ConnectionError("connection closed by the server")
            return data[:-2]
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise ConnectionError(f"unexpected RESP reply {line[:40]!r}")

    def call(self, *args: Any) -> Any:
        self.sock.sendall(self.encode(*args))
        r = self._read()
        if isinstance(r, RespError):
            raise r
        return r

    def pipeline(self, cmds: list[tuple[Any, ...]]) -> list[Any]:
        """Send every command, then read every reply (errors are returned, not raised)."""
        self.sock.sendall(b"".join(self.encode(*c) for c in cmds))
        return [self._read() for _ in cmds]

    def close(self) -> None:
        try:
            self.rf.close()
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> Resp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def client_context(tls_dir: str, name: str = "client") -> ssl.SSLContext:
    """A TLS client context trusting ``tls_dir/ca.pem`` and presenting ``tls_dir/NAME.pem``
    (the files ``marekvs certs`` and ``cluster up --tls`` make)."""
    ctx = ssl.create_default_context(cafile=os.path.join(tls_dir, "ca.pem"))
    ctx.load_cert_chain(os.path.join(tls_dir, f"{name}.pem"), os.path.join(tls_dir, f"{name}.key"))
    return ctx


def ping(port: int, timeout: float = 1.0, tls_dir: str = "") -> bool:
    try:
        with Resp(port, timeout=timeout, tls_dir=tls_dir) as c:
            return c.call("PING") == "PONG"
    except (OSError, RespError, ValueError):
        return False


def parse_info(text: str | bytes) -> dict[str, Any]:
    """INFO text -> {field: value}; ``peerN`` values become dicts (id=..,state=..,...)."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    out: dict[str, Any] = {}
    for line in text.splitlines():
        if not line or line.startswith("#") or ":" not in line:
            continue
        k, v = line.split(":", 1)
        if k.startswith("peer") and k[4:].isdigit():
            d = {}
            for part in v.split(","):
                if "=" in part:
                    pk, pv = part.split("=", 1)
                    d[pk] = pv
            out[k] = d
        else:
            out[k] = v
    return out


def peer_links(info: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``peerN`` entries of a parsed INFO replication, in order."""
    keys = sorted((k for k in info if k.startswith("peer") and k[4:].isdigit()), key=lambda k: int(k[4:]))
    return [info[k] for k in keys]


# -- processes ------------------------------------------------------------------------------
