"""ACL users on three real nodes: a user created on node 1 authenticates on node 3, a
change made on node 2 takes effect on node 1 (on a connection already open there), a
user deleted on node 3 is refused everywhere and its connections on every node are
closed; refused rules change nothing anywhere; CONFIG SET requirepass on one node is the
default user's password on all, while the peer links keep replicating (they authenticate
with the cluster secret, never with ACL users). Every step waits for the event it needs.
"""

from __future__ import annotations

import hashlib
import socket

import pytest
import redis

from tests.cluster import Cluster, wait_for
from tests.helpers import mb

TIMEOUT = 60
WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."


@pytest.fixture
def cluster(tmp_path):
    with Cluster(tmp_path, n=3) as c:
        c.wait_streaming(timeout=TIMEOUT)
        yield c


def acl_list(cluster: Cluster, i: int) -> list[bytes]:
    with cluster.client(i) as c:
        return c.execute_command("ACL", "LIST")


def auth_result(cluster: Cluster, i: int, user: str, password: str) -> str:
    with cluster.client(i) as c:
        try:
            return str(c.execute_command("AUTH", user, password))
        except redis.AuthenticationError as e:  # (redis-py's class for WRONGPASS)
            return "WRONGPASS " + str(e)


class Conn:
    """A raw connection (to see it closed by the server)."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)

    def call(self, *args: str) -> bytes:
        self.sock.sendall(mb(*[a.encode() for a in args]))
        return self.sock.recv(1 << 16)

    def closed_by_server(self) -> bool:
        self.sock.settimeout(TIMEOUT)
        try:
            return self.sock.recv(1 << 16) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


def test_a_user_created_changed_and_deleted_anywhere_is_so_everywhere(cluster):
    # created on node 1: AUTH works on node 3
    with cluster.client(1) as c:
        assert c.execute_command("ACL", "SETUSER", "alice", "on", ">pw", "~app:*", "+@all") == b"OK"
    wait_for(lambda: auth_result(cluster, 3, "alice", "pw") == "True", TIMEOUT,
             "alice authenticating on node 3")
    wait_for(lambda: auth_result(cluster, 2, "alice", "pw") == "True", TIMEOUT,
             "alice authenticating on node 2")  # (each link is its own: node 2 may be later than 3)
    on1 = Conn(cluster[1].port)
    on2 = Conn(cluster[2].port)
    for conn in (on1, on2):
        assert conn.call("AUTH", "alice", "pw") == b"+OK\r\n"
        assert conn.call("SET", "app:1", "v") == b"+OK\r\n"

    # changed on node 2: the connection already open on node 1 gets the new rules
    with cluster.client(2) as c:
        c.execute_command("ACL", "SETUSER", "alice", "-set")
    wait_for(lambda: on1.call("SET", "app:1", "w").startswith(b"-NOPERM"), TIMEOUT,
             "node 1 refusing alice's SET")
    assert on1.call("SET", "app:1", "w") == b"-NOPERM this user has no permissions to run the 'set' command\r\n"
    assert on1.call("GET", "other") == (b"-NOPERM this user has no permissions to access one of the keys used as "
                                        b"arguments\r\n")
    wait_for(lambda: len({tuple(acl_list(cluster, i)) for i in (1, 2, 3)}) == 1, TIMEOUT, "equal ACL LIST")

    # deleted on node 3: refused everywhere, its connections on nodes 1 and 2 closed
    with cluster.client(3) as c:
        assert c.execute_command("ACL", "DELUSER", "alice") == 1
    for i in (1, 2, 3):
        wait_for(lambda i=i: auth_result(cluster, i, "alice", "pw") == WRONGPASS, TIMEOUT, f"node {i} refusing alice")
    assert on1.closed_by_server() and on2.closed_by_server()
    on1.close()
    on2.close()
    assert {tuple(acl_list(cluster, i)) for i in (1, 2, 3)} == {(b"user default on nopass ~* &* +@all",)}


def test_refused_rules_change_nothing_anywhere(cluster):
    with cluster.client(2) as c:
        c.execute_command("ACL", "SETUSER", "bob", "on", ">pw", "~b*", "+get")
        for rules, text in ((["+set", "+nocmd"], "Error in ACL SETUSER modifier '+nocmd': Unknown command or "
                                                  "category name in ACL"),
                            (["~c*", "(~x"], "Unmatched parenthesis in acl selector starting at '(~x'."),
                            (["allkeys", "~z"], "Error in ACL SETUSER modifier '~z': Adding a pattern after the * "
                                                "pattern (or the 'allkeys' flag) is not valid and does not have "
                                                "any effect. Try 'resetkeys' to start with an empty list of "
                                                "patterns")):
            with pytest.raises(redis.ResponseError) as e:
                c.execute_command("ACL", "SETUSER", "bob", *rules)
            assert str(e.value) == text
        # a later change, so that once it is everywhere the refused ones would be too
        c.execute_command("ACL", "SETUSER", "sentinel", "on")
    want = acl_list(cluster, 2)
    assert want == [b"user bob on #" + _sha(b"pw") + b" ~b* resetchannels -@all +get",
                    b"user default on nopass ~* &* +@all", b"user sentinel on resetchannels -@all"]
    for i in (1, 3):
        wait_for(lambda i=i: acl_list(cluster, i) == want, TIMEOUT, f"node {i} holding the sentinel user")


def _sha(b: bytes) -> bytes:
    return hashlib.sha256(b).hexdigest().encode()


def test_requirepass_on_one_node_is_the_password_everywhere_and_links_keep_replicating(cluster):
    with cluster.client(1) as c:
        c.execute_command("CONFIG", "SET", "requirepass", "s3cret")

    def refused(i: int) -> bool:
        with cluster.client(i) as c:
            try:
                c.execute_command("GET", "k")
                return False
            except redis.AuthenticationError:
                return True

    for i in (2, 3):
        wait_for(lambda i=i: refused(i), TIMEOUT, f"node {i} asking for the password")
    # replication does not use ACL users: a write on node 3 reaches node 1
    with cluster.client(3, password="s3cret") as c:
        c.set("after", "v")
    with cluster.client(1, password="s3cret") as c:
        wait_for(lambda: c.get("after") == b"v", TIMEOUT, "the write replicated to node 1")
        c.execute_command("CONFIG", "SET", "requirepass", "")
    for i in (2, 3):
        wait_for(lambda i=i: not refused(i), TIMEOUT, f"node {i} open again")
