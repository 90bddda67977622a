"""Peer links over mutual TLS: a CA and node certificates made with the openssl CLI
(``launcher/certs.py``); a 2-node cluster with --tls-cert/--tls-key/--tls-ca/--tls-server-name
converges, and a caller without a client certificate (or with one from another CA, or in
plaintext) is refused before it reaches the service."""

from __future__ import annotations

import shutil
from pathlib import Path

import grpc
import pytest

from marekvs.core.partition import PARTITIONS
from marekvs.launcher.certs import make_ca, make_cert
from marekvs.replication.gen import replication_v1_pb2 as pb
from marekvs.replication.gen import replication_v1_pb2_grpc as pbg
from marekvs.storage.engine import FORMAT_VERSION
from tests.cluster import SECRET, Cluster

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI not installed")]

NAME = "marekvs.test"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    make_ca(d, "ca")
    make_ca(d, "rogue-ca")
    for n in ("node1", "node2", "client"):
        make_cert(d, n, cn=NAME, hosts=[NAME, "127.0.0.1"])
    make_cert(d, "rogue", ca="rogue-ca", cn=NAME, hosts=[NAME, "127.0.0.1"])
    return d


def tls_args(pki: Path, name: str) -> list[str]:
    return ["--tls-cert", str(pki / f"{name}.pem"), "--tls-key", str(pki / f"{name}.key"),
            "--tls-ca", str(pki / "ca.pem"), "--tls-server-name", NAME]


def hello(channel: grpc.Channel) -> pb.HelloReply:
    info = pb.NodeInfo(node_id=2, cluster_name="marekvs", format_version=FORMAT_VERSION, partitions=PARTITIONS)
    return pbg.ReplicationStub(channel).Hello(pb.HelloRequest(node=info),
                                              metadata=(("x-marekvs-secret", SECRET),), timeout=3)


def test_mutual_tls_cluster_converges_and_refuses_callers_without_a_trusted_cert(tmp_path, pki):
    c = Cluster(tmp_path, n=2, per_node_extra={1: tls_args(pki, "node1"), 2: tls_args(pki, "node2")})
    try:
        c.wait_streaming(20)
        r1, r2 = c.client(1), c.client(2)
        r1.mset({f"tls:{i}": str(i) for i in range(100)})
        r2.set("tls:from2", "x")
        assert r1.wait(1, 5000) == 1 and r2.wait(1, 5000) == 1
        c.wait_converged(20)
        assert r2.get("tls:99") == b"99" and r1.get("tls:from2") == b"x"

        addr = f"127.0.0.1:{c[2].grpc_port}"
        opts = [("grpc.ssl_target_name_override", NAME)]
        ca = (pki / "ca.pem").read_bytes()

        def creds(cert: str | None) -> grpc.ChannelCredentials:
            if cert is None:
                return grpc.ssl_channel_credentials(root_certificates=ca)
            return grpc.ssl_channel_credentials(root_certificates=ca, private_key=(pki / f"{cert}.key").read_bytes(),
                                                certificate_chain=(pki / f"{cert}.pem").read_bytes())

        # the trusted client certificate gets through TLS (and then meets Hello's own checks)
        with grpc.secure_channel(addr, creds("client"), options=opts) as ch:
            with pytest.raises(grpc.RpcError) as ei:
                hello(ch)  # it claims node 2's own id
            assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION, ei.value
        for cert in (None, "rogue"):
            with grpc.secure_channel(addr, creds(cert), options=opts) as ch:
                with pytest.raises(grpc.RpcError) as ei:
                    hello(ch)
                assert ei.value.code() == grpc.StatusCode.UNAVAILABLE, (cert, ei.value)
        with grpc.insecure_channel(addr) as ch:
            with pytest.raises(grpc.RpcError) as ei:
                hello(ch)
            assert ei.value.code() == grpc.StatusCode.UNAVAILABLE, ei.value
        assert c.info(2)["known_peers"] == "1"
    finally:
        c.stop()
