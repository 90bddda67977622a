"""TLS for clients: the server-side ``ssl.SSLContext`` built from Redis's tls-* settings.

``build_context(config)`` does what Redis 7.0's ``tlsConfigure`` does (src/tls.c), with its
checks and log texts, on Python's ``ssl`` module (the OpenSSL the interpreter links):

- ``tls-cert-file`` / ``tls-key-file`` (``tls-key-file-pass`` for an encrypted key) are
  required; ``tls-ca-cert-file`` or ``tls-ca-cert-dir`` are required too when clients must
  (``tls-auth-clients yes``) or may (``optional``) present a certificate, or when the peer
  links use these files (``tls-replication yes``);
- ``tls-auth-clients``: yes = a verified certificate is required (``CERT_REQUIRED``, OpenSSL's
  VERIFY_PEER|FAIL_IF_NO_PEER_CERT), optional = verified if presented, no = not asked for;
- ``tls-protocols``: the versions served, TLSv1.2 and TLSv1.3 when empty. Python sets a
  minimum and a maximum version, so a list with a gap ("TLSv1 TLSv1.2") serves its whole
  range, where Redis switches each version off on its own;
- ``tls-ciphers`` (TLSv1.2 and below), ``tls-prefer-server-ciphers``, ``tls-dh-params-file``
  through the ``ssl`` API; client-initiated renegotiation is off, as in Redis;
- ``tls-ciphersuites`` (TLSv1.3) and ``tls-session-caching`` / ``-cache-size`` /
  ``-cache-timeout`` have no ``ssl`` API: ``_OpenSSL`` calls OpenSSL's ``SSL_CTX_*``
  functions for them on the context's own ``SSL_CTX`` (the pointer is checked against the
  context's options before it is used), in the library the ``_ssl`` module itself links.

Every failure raises ``TlsConfigError`` with the line Redis logs; the caller logs it and
either refuses to start or, for CONFIG SET, keeps the old context (a context is built
whole before it replaces the one in use, so a rotation is atomic).
"""

from __future__ import annotations

import ctypes
import logging
import ssl
from typing import Any, Callable

log = logging.getLogger("marekvs.server")

_VERSIONS = {"tlsv1": ssl.TLSVersion.TLSv1, "tlsv1.1": ssl.TLSVersion.TLSv1_1,
             "tlsv1.2": ssl.TLSVersion.TLSv1_2, "tlsv1.3": ssl.TLSVersion.TLSv1_3}
_VERIFY = {"no": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "yes": ssl.CERT_REQUIRED}


class TlsConfigError(ValueError):
    """The TLS settings cannot be applied (the message is what Redis logs)."""


class ServerTls:
    """The context the TLS port, the Kafka listener with ``kafka_tls yes`` and the HTTPS
    metrics exporter give new connections (one object for all of them, so a rotation by
    CONFIG SET reaches every listener that reads ``context`` per connection)."""

    def __init__(self, config: Any):
        self.context: ssl.SSLContext | None = build_context(config) if self.needed(config) else None

    @staticmethod
    def needed(config: Any) -> bool:
        return bool(config.tls_port) or config.metrics_tls == "yes" or config.kafka_tls == "yes"

    def prepare(self, config: Any) -> Callable[[], None]:
        """CONFIG SET of tls-* names: ``config`` holds the proposed settings. Returns what
        makes a context built from them serve the connections accepted from then on (those
        open keep theirs); if it cannot be built, ``TlsConfigError`` (logged), and the old
        one stays. Without a TLS listener the settings are only kept, as Redis keeps them."""
        if not self.needed(config):
            return _nothing
        try:
            context = build_context(config)
        except TlsConfigError as e:
            log.warning("%s", e)
            raise

        def swap() -> None:
            self.context = context
        return swap


def _nothing() -> None:
    pass


def protocol_range(text: str) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    """``tls-protocols`` (Redis's parseProtocolsConfig: space-separated, any case) as the
    lowest and highest version served."""
    if not text:
        return ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3
    versions = []
    for token in text.split(" "):
        v = _VERSIONS.get(token.lower())
        if v is None:
            raise TlsConfigError("Invalid tls-protocols specified. "
                                 "Use a combination of 'TLSv1', 'TLSv1.1', 'TLSv1.2' and 'TLSv1.3'.")
        versions.append(v)
    return min(versions), max(versions)


def build_context(config: Any) -> ssl.SSLContext:
    """The server context of ``config``'s tls-* settings (``TlsConfigError`` if they cannot
    be applied)."""
    c = config
    if not c.tls_cert_file:
        raise TlsConfigError("No tls-cert-file configured!")
    if not c.tls_key_file:
        raise TlsConfigError("No tls-key-file configured!")
    if (c.tls_auth_clients != "no" or c.tls_replication == "yes") and not (c.tls_ca_cert_file or c.tls_ca_cert_dir):
        raise TlsConfigError("Either tls-ca-cert-file or tls-ca-cert-dir must be specified when "
                             "tls-replication or tls-auth-clients are enabled!")
    lowest, highest = protocol_range(c.tls_protocols)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version, ctx.maximum_version = lowest, highest
    ctx.options |= ssl.OP_NO_RENEGOTIATION
    if c.tls_prefer_server_ciphers == "yes":
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:  # (Python turns it on by default; Redis leaves OpenSSL's default, off)
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    password = c.tls_key_file_pass
    try:
        # (a callable: an encrypted key without a passphrase fails instead of prompting)
        ctx.load_cert_chain(c.tls_cert_file, c.tls_key_file, password=lambda: password)
    except (OSError, ssl.SSLError) as e:
        raise TlsConfigError(f"Failed to load certificate or private key: {c.tls_cert_file}, "
                             f"{c.tls_key_file}: {_reason(e)}") from None
    if c.tls_ca_cert_file or c.tls_ca_cert_dir:
        try:
            ctx.load_verify_locations(cafile=c.tls_ca_cert_file or None, capath=c.tls_ca_cert_dir or None)
        except (OSError, ssl.SSLError) as e:
            raise TlsConfigError(f"Failed to configure CA certificate(s) file/directory: {_reason(e)}") from None
    ctx.verify_mode = _VERIFY[c.tls_auth_clients]
    if c.tls_ciphers:
        try:
            ctx.set_ciphers(c.tls_ciphers)
        except ssl.SSLError:
            raise TlsConfigError(f"Failed to configure ciphers: {c.tls_ciphers}") from None
    if c.tls_dh_params_file:
        try:
            ctx.load_dh_params(c.tls_dh_params_file)
        except (OSError, ssl.SSLError) as e:
            raise TlsConfigError(f"Failed to load DH params file: {c.tls_dh_params_file}: {_reason(e)}") from None
    native = _native()
    if c.tls_ciphersuites and not native.set_ciphersuites(ctx, c.tls_ciphersuites):
        raise TlsConfigError(f"Failed to configure ciphersuites: {c.tls_ciphersuites}")
    if c.tls_session_caching == "yes":
        native.session_cache(ctx, c.tls_session_cache_size, c.tls_session_cache_timeout)
    else:
        native.session_cache(ctx, None, None)
    return ctx


def _reason(e: BaseException) -> str:
    return getattr(e, "reason", None) or getattr(e, "strerror", None) or str(e)


def peer_common_name(ssl_object: Any) -> str | None:
    """The CN of the client certificate a TLS connection presented (verified by the
    handshake), or None."""
    cert = ssl_object.getpeercert() if ssl_object is not None else None
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


# -- what the ssl module does not offer -------------------------------------------------------

_SSL_CTRL_SET_SESS_CACHE_SIZE = 42
_SSL_CTRL_GET_SESS_CACHE_SIZE = 43
_SSL_CTRL_SET_SESS_CACHE_MODE = 44
_SSL_CTRL_GET_SESS_CACHE_MODE = 45
SESS_CACHE_OFF = 0
SESS_CACHE_SERVER = 2


class _OpenSSL:
    """OpenSSL's SSL_CTX functions for TLSv1.3 ciphersuites and the session cache, called on
    an ``ssl.SSLContext``'s own SSL_CTX. The library is the one the ``_ssl`` extension links
    (``dlopen`` of the extension resolves its dependencies); the SSL_CTX pointer is the first
    field after the object header of CPython's ``PySSLContext`` and is used only once
    ``SSL_CTX_get_options`` through it agrees with ``SSLContext.options``."""

    def __init__(self) -> None:
        lib = ctypes.CDLL(getattr(ssl._ssl, "__file__", None))  # type: ignore[attr-defined]
        lib.SSL_CTX_get_options.argtypes = [ctypes.c_void_p]
        lib.SSL_CTX_get_options.restype = ctypes.c_uint64
        lib.SSL_CTX_ctrl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_void_p]
        lib.SSL_CTX_ctrl.restype = ctypes.c_long
        lib.SSL_CTX_set_timeout.argtypes = [ctypes.c_void_p, ctypes.c_long]
        lib.SSL_CTX_set_timeout.restype = ctypes.c_long
        lib.SSL_CTX_get_timeout.argtypes = [ctypes.c_void_p]
        lib.SSL_CTX_get_timeout.restype = ctypes.c_long
        lib.SSL_CTX_set_ciphersuites.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.SSL_CTX_set_ciphersuites.restype = ctypes.c_int
        self.lib = lib

    def handle(self, ctx: ssl.SSLContext) -> int:
        p = ctypes.c_void_p.from_address(id(ctx) + object.__basicsize__).value
        if not p or self.lib.SSL_CTX_get_options(p) != int(ctx.options):
            raise TlsConfigError("cannot reach the SSL_CTX of this Python's ssl module")
        return p

    def set_ciphersuites(self, ctx: ssl.SSLContext, suites: str) -> bool:
        return self.lib.SSL_CTX_set_ciphersuites(self.handle(ctx), suites.encode()) == 1

    def session_cache(self, ctx: ssl.SSLContext, size: int | None, timeout: int | None) -> None:
        """Sessions cached server-side (``size`` of them, resumable for ``timeout``
        seconds), or, with None, no cache (Redis's ``tls-session-caching no``)."""
        p = self.handle(ctx)
        if size is None:
            self.lib.SSL_CTX_ctrl(p, _SSL_CTRL_SET_SESS_CACHE_MODE, SESS_CACHE_OFF, None)
            return
        self.lib.SSL_CTX_ctrl(p, _SSL_CTRL_SET_SESS_CACHE_MODE, SESS_CACHE_SERVER, None)
        self.lib.SSL_CTX_ctrl(p, _SSL_CTRL_SET_SESS_CACHE_SIZE, size, None)
        self.lib.SSL_CTX_set_timeout(p, timeout or 0)

    def session_settings(self, ctx: ssl.SSLContext) -> tuple[int, int, int]:
        """(cache mode, size, timeout) as OpenSSL holds them (for tests)."""
        p = self.handle(ctx)
        return (self.lib.SSL_CTX_ctrl(p, _SSL_CTRL_GET_SESS_CACHE_MODE, 0, None),
                self.lib.SSL_CTX_ctrl(p, _SSL_CTRL_GET_SESS_CACHE_SIZE, 0, None),
                self.lib.SSL_CTX_get_timeout(p))


_NATIVE: _OpenSSL | None = None


def release_freed_memory() -> bool:
    """Give the heap's free pages back to the OS (glibc's ``malloc_trim``; False where
    there is none). uvloop gives every TLS connection a 256 KiB read buffer from the heap
    (glibc's dynamic mmap threshold stops mmapping blocks of that size after the first
    is freed), so a storm of handshakes leaves the heap that much bigger, fragmented by
    what stays alive in between, and glibc keeps what is freed."""
    try:
        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):
        return False


def _native() -> _OpenSSL:
    global _NATIVE
    if _NATIVE is None:
        try:
            _NATIVE = _OpenSSL()
        except (OSError, AttributeError) as e:
            raise TlsConfigError(f"OpenSSL's SSL_CTX functions are not reachable from this Python: {e}") from None
    return _NATIVE
