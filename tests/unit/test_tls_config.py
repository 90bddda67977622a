"""The TLS settings without a server: option checks, the context Redis's tls-* settings build
(``server/tls.py``), with Redis's refusals, and which files the peer links use."""

from __future__ import annotations

import shutil
import ssl
import subprocess

import pytest

from marekvs import config as cfgmod
from marekvs.launcher import certs
from marekvs.replication import peers
from marekvs.server import tls

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI not installed")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = certs.make_pki(tmp_path_factory.mktemp("pki"), ["node1"])
    subprocess.run(["openssl", "pkey", "-in", "node1.key", "-out", "node1.enc.key", "-aes256", "-passout", "pass:1234"],
                   cwd=d, check=True, capture_output=True)
    (d / "cadir").mkdir()
    shutil.copy(d / "ca.pem", d / "cadir" / "ca.pem")
    return d


def conf(pki, **kw) -> cfgmod.Config:
    base = dict(tls_port=6380, tls_cert_file=str(pki / "node1.pem"), tls_key_file=str(pki / "node1.key"),
                tls_ca_cert_file=str(pki / "ca.pem"))
    base.update(kw)
    return cfgmod.Config(**base)


def test_options_port_zero_serves_tls_only_and_word_options_are_checked():
    c = cfgmod.load(env={}, overrides={"port": "0", "tls_port": "6380", "tls_auth_clients_user": "cn",
                                       "tls_auth_clients": "OPTIONAL"})
    assert (c.port, c.tls_port, c.client_port) == (0, 6380, 6380)
    assert (c.tls_auth_clients_user, c.tls_auth_clients) == ("CN", "optional")  # as CONFIG GET prints them
    with pytest.raises(ValueError, match="both 0"):
        cfgmod.load(env={}, overrides={"port": "0"})
    with pytest.raises(ValueError, match="tls_auth_clients must be one of no, yes, optional"):
        cfgmod.load(env={}, overrides={"tls_auth_clients": "maybe"})
    with pytest.raises(ValueError, match="tls_port 70000 out of range"):
        cfgmod.load(env={}, overrides={"tls_port": "70000"})
    # the Redis names in the TOML file, dashes or underscores, and in the environment
    c = cfgmod.load(env={"MAREKVS_TLS_CERT_FILE": "/env.pem"}, overrides={})
    assert c.tls_cert_file == "/env.pem" and c.tls_session_cache_size == 20480 and c.tls_session_cache_timeout == 300


def test_kafka_tls_needs_a_kafka_port_and_the_certificate_files():
    c = cfgmod.load(env={"MAREKVS_KAFKA_TLS": "YES"}, overrides={"kafka_port": "9092"})
    assert c.kafka_tls == "yes" and tls.ServerTls.needed(c)
    assert not tls.ServerTls.needed(cfgmod.load(env={}, overrides={"kafka_port": "9092"}))
    with pytest.raises(ValueError, match="kafka_tls yes needs a kafka_port"):
        cfgmod.load(env={}, overrides={"kafka_tls": "yes"})
    with pytest.raises(ValueError, match="kafka_tls must be one of yes, no"):
        cfgmod.load(env={}, overrides={"kafka_port": "9092", "kafka_tls": "ssl"})
    # without a TLS port the Kafka listener alone needs the context: no certificate, no start
    with pytest.raises(tls.TlsConfigError, match="No tls-cert-file configured!"):
        tls.ServerTls(cfgmod.Config(kafka_port=9092, kafka_tls="yes"))


def test_context_follows_the_settings(pki):
    ctx = tls.build_context(conf(pki))
    assert ctx.verify_mode == ssl.CERT_REQUIRED  # tls-auth-clients yes (the default)
    assert (ctx.minimum_version, ctx.maximum_version) == (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3)
    assert not ctx.options & ssl.OP_CIPHER_SERVER_PREFERENCE and ctx.options & ssl.OP_NO_RENEGOTIATION
    native = tls._native()
    assert native.session_settings(ctx) == (tls.SESS_CACHE_SERVER, 20480, 300)
    ctx = tls.build_context(conf(pki, tls_auth_clients="optional", tls_protocols="TLSv1.3",
                                 tls_prefer_server_ciphers="yes", tls_session_caching="no",
                                 tls_ciphers="ECDHE-ECDSA-AES256-GCM-SHA384",
                                 tls_ciphersuites="TLS_CHACHA20_POLY1305_SHA256"))
    assert ctx.verify_mode == ssl.CERT_OPTIONAL and ctx.minimum_version == ssl.TLSVersion.TLSv1_3
    assert ctx.options & ssl.OP_CIPHER_SERVER_PREFERENCE
    assert native.session_settings(ctx)[0] == tls.SESS_CACHE_OFF
    names = {c["name"] for c in ctx.get_ciphers()}
    assert "TLS_CHACHA20_POLY1305_SHA256" in names and "TLS_AES_256_GCM_SHA384" not in names
    assert "ECDHE-ECDSA-AES256-GCM-SHA384" in names and "ECDHE-ECDSA-AES128-GCM-SHA256" not in names
    assert tls.build_context(conf(pki, tls_auth_clients="no", tls_ca_cert_file="")).verify_mode == ssl.CERT_NONE
    # an encrypted key with its passphrase; a CA directory
    tls.build_context(conf(pki, tls_key_file=str(pki / "node1.enc.key"), tls_key_file_pass="1234",
                           tls_ca_cert_file="", tls_ca_cert_dir=str(pki / "cadir")))


@pytest.mark.parametrize("change, logged", [
    ({"tls_cert_file": ""}, "No tls-cert-file configured!"),
    ({"tls_key_file": ""}, "No tls-key-file configured!"),
    ({"tls_ca_cert_file": ""}, "Either tls-ca-cert-file or tls-ca-cert-dir must be specified"),
    ({"tls_protocols": "TLSv1.9"}, "Invalid tls-protocols specified."),
    ({"tls_protocols": "TLSv1.2  TLSv1.3"}, "Invalid tls-protocols specified."),  # (an empty token, as Redis)
    ({"tls_ciphers": "BOGUS"}, "Failed to configure ciphers: BOGUS"),
    ({"tls_ciphersuites": "BOGUS"}, "Failed to configure ciphersuites: BOGUS"),
    ({"tls_cert_file": "/nonexistent.pem"}, "Failed to load certificate or private key"),
    ({"tls_key_file": "enc"}, "Failed to load certificate or private key"),  # no passphrase: refused, not asked
    ({"tls_key_file": "enc", "tls_key_file_pass": "wrong"}, "Failed to load certificate or private key"),
    ({"tls_ca_cert_file": "/nonexistent.pem"}, "Failed to configure CA certificate(s) file/directory"),
    ({"tls_dh_params_file": "/nonexistent.pem"}, "Failed to load DH params file"),
])
def test_settings_redis_refuses_are_refused_with_its_log_line(pki, change, logged):
    if change.get("tls_key_file") == "enc":
        change["tls_key_file"] = str(pki / "node1.enc.key")
    with pytest.raises(tls.TlsConfigError) as ei:
        tls.build_context(conf(pki, **change))
    assert str(ei.value).startswith(logged)


def test_peer_links_use_the_redis_names_only_with_tls_replication(pki):
    c = conf(pki)
    assert c.peer_tls_files() == ("", "", "")  # tls_replication no: peers in the clear, as before
    assert peers.server_credentials(c) is None
    c = conf(pki, tls_replication="yes")
    assert c.peer_tls_files() == (str(pki / "node1.pem"), str(pki / "node1.key"), str(pki / "ca.pem"))
    c = conf(pki, tls_replication="yes", tls_cert="/peer.pem", tls_key="/peer.key", tls_ca="/peer-ca.pem")
    assert c.peer_tls_files() == ("/peer.pem", "/peer.key", "/peer-ca.pem")  # the peer names win
    c = conf(pki, tls_replication="yes", tls_ca_cert_file="", tls_ca_cert_dir=str(pki / "cadir"))
    assert peers.peer_ca_bundle(c).strip() == (pki / "ca.pem").read_bytes().strip()
    c = conf(pki, tls_replication="yes", tls_key_file=str(pki / "node1.enc.key"), tls_key_file_pass="1234")
    with pytest.raises(ValueError, match="unencrypted private key"):
        peers.server_credentials(c)
