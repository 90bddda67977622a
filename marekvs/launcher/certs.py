"""Throwaway certificates for a local or test cluster: a CA, node certificates and client
certificates, made with the ``openssl`` command-line tool (Debian's ``openssl`` package;
every Debian-based image that has ``ca-certificates`` has it).

- A node certificate serves both ends of TLS: the node presents it on its TLS port and to
  its peers, and with it dials its peers (mutual TLS): extended key usage serverAuth and
  clientAuth, subject alternative names for the node's host name, ``localhost`` and
  ``127.0.0.1``.
- A client certificate (clientAuth) is what ``redis-cli --tls --cert/--key`` presents when
  the node requires one (``tls-auth-clients yes``, the default); its CN is its name, so with
  ``tls-auth-clients-user CN`` it logs in as the ACL user of that name.

Keys are EC P-256, certificates valid for ``DAYS`` days (a negative number makes one that
has already expired, for tests). Used by ``marekvs cluster up --tls``, ``marekvs certs``
(the docker compose TLS variant runs it in a container) and the tests.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterable

DAYS = 825  # (the longest validity clients such as macOS accept for a server certificate)
LOCAL_HOSTS = ("localhost", "127.0.0.1")


class CertError(RuntimeError):
    """openssl is missing or failed."""


def _openssl(d: Path, *args: str) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise CertError("making certificates needs the openssl command (Debian: apt-get install openssl)")
    r = subprocess.run([exe, *args], cwd=d, capture_output=True)
    if r.returncode != 0:
        raise CertError(f"openssl {args[0]} failed: {r.stderr.decode(errors='replace').strip()}")


def _key(d: Path, name: str) -> list[str]:
    return ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{name}.key"]


def make_ca(d: Path, name: str = "ca", days: int = DAYS) -> Path:
    """A self-signed CA: ``d/name.pem`` and its key ``d/name.key``. Returns the certificate."""
    _openssl(d, "req", "-x509", *_key(d, name), "-out", f"{name}.pem", "-days", str(days),
             "-subj", f"/CN={name}")
    return d / f"{name}.pem"


def make_cert(d: Path, name: str, ca: str = "ca", cn: str | None = None, hosts: Iterable[str] = (),
              server: bool = True, days: int = DAYS) -> tuple[Path, Path]:
    """``d/name.pem`` and ``d/name.key``, signed by the CA ``d/ca.pem``: CN ``cn`` (default
    ``name``), the subject alternative names ``hosts`` (IP addresses or DNS names), for TLS
    servers and clients (``server``) or clients only."""
    _openssl(d, "req", *_key(d, name), "-out", f"{name}.csr", "-subj", f"/CN={cn or name}")
    sans = [f"IP:{h}" if h.replace(".", "").isdigit() or ":" in h else f"DNS:{h}" for h in hosts]
    ext = [f"subjectAltName={','.join(sans)}"] if sans else []
    ext.append("extendedKeyUsage=" + ("serverAuth,clientAuth" if server else "clientAuth"))
    (d / f"{name}.ext").write_text("\n".join(ext) + "\n")
    _openssl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.pem", "-days", str(days), "-extfile", f"{name}.ext")
    for tmp in (f"{name}.csr", f"{name}.ext"):
        (d / tmp).unlink()
    return d / f"{name}.pem", d / f"{name}.key"


def make_pki(d: Path, nodes: Iterable[str], clients: Iterable[str] = ("client",),
             hosts: Iterable[str] = LOCAL_HOSTS, readable: bool = False) -> Path:
    """A CA (``ca.pem``, kept with its key to sign more later) unless ``d`` has one, a
    certificate per node name (its name, and ``hosts``, as alternative names) and per
    client name. Keys are readable by their owner only, unless ``readable`` (a directory
    shared with containers running as another user). Returns ``d``."""
    d.mkdir(parents=True, exist_ok=True)
    if not (d / "ca.pem").exists() or not (d / "ca.key").exists():
        make_ca(d)
    hosts = list(hosts)
    for n in nodes:
        make_cert(d, n, hosts=[n, *[h for h in hosts if h != n]])
    for c in clients:
        make_cert(d, c, server=False)
    for f in d.iterdir():
        if f.suffix == ".key":
            os.chmod(f, 0o644 if readable else 0o600)
        elif f.suffix in (".pem", ".srl"):
            os.chmod(f, 0o644)
    return d


def node_args(d: Path, name: str, ca: str = "ca") -> list[str]:
    """``marekvs serve`` flags for a node of ``make_pki``: its certificate and key serve the
    TLS port and, through ``tls_replication``, its peer links (mutual TLS)."""
    return ["--tls-cert-file", str(d / f"{name}.pem"), "--tls-key-file", str(d / f"{name}.key"),
            "--tls-ca-cert-file", str(d / f"{ca}.pem"), "--tls-replication", "yes"]
