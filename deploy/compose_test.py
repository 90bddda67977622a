#!/usr/bin/env python3
"""The three-node docker compose cluster, built and run for real, checked from the host.

    .venv/bin/python deploy/compose_test.py            # as tests/integration/test_docker.py runs it

1. Docker: uses the running engine, or starts ``dockerd`` (root only) and stops that one, by
   its pid, at the end. Builds the local base image (deploy/base-image.sh: Debian bookworm
   from debootstrap, no image registry needed) unless it exists, then the marekvs image
   (deploy/Dockerfile with ``BASE_IMAGE`` = that base, ``--network host`` for pip).
2. ``compose -p <unique project> up``: deploy/docker-compose.yml with RESP published on
   127.0.0.1 only, on free ports; waits until Docker reports every container healthy.
3. From the host, redis-cli and redis-py on those loopback ports: a write on node 1 is read on
   nodes 2 and 3; concurrent INCRs on all three nodes sum; ``marekvs cluster status --ports``
   shows every link streaming. A Kafka record produced through node 1's published Kafka port
   is read through node 3's (confluent-kafka).
4. Under write load on all three nodes (durability ``always``), ``docker kill`` node 3, start
   it again: the nodes converge (DEBUG DIGEST) and every acknowledged write, node 3's own
   before and after its restart included, is on every node.
5. Node 3 stopped, a one-off container on its volume deletes one partition's records behind
   the engine's back (a disk that lost files); ``marekvs repair --verify`` run inside the
   compose network finds and repairs them: node 3 serves them again, digests agree.
6. ``compose stop`` (each node exits 0 and logs a clean stop), ``compose down``, ``up``: the
   volumes kept everything (same DEBUG DIGEST, every key).
7. The TLS variant (``-f docker-compose.tls.yml`` on top, a project of its own after the first
   is down): the certs service makes the CA and certificates, every node turns healthy (its
   health check PINGs over TLS), ``redis-cli --tls`` from the host writes on node 1 and reads
   on node 3 (the peers replicate over mutual TLS), plaintext RESP gets nothing,
   ``marekvs cluster status --ports --tls-dir`` shows every link streaming, and a Kafka record
   produced over SSL through node 1 is read over SSL through node 3.
8. ``compose down -v``: the projects' containers, networks and volumes are removed (checked),
   and the run's image tag.

Exit status 0: passed; 1: failed; 77: Docker cannot run here at all (the reason is the last
line of stderr, ``SKIP: ...``). ``--report FILE`` writes the duration of each step as JSON.
Containers talk to each other only on the project's compose network; the host talks to them
only on the loopback ports they publish.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
COMPOSE_FILE = DEPLOY / "docker-compose.yml"
TLS_FILE = DEPLOY / "docker-compose.tls.yml"
SKIP = 77
LOCK_DIR = Path("/run/lock") if Path("/run/lock").is_dir() else Path(tempfile.gettempdir())
ENGINE_LOCK = LOCK_DIR / "marekvs-compose-test.engine.lock"
BASE_LOCK = LOCK_DIR / "marekvs-compose-test.base.lock"
# {"dockerd": pid, "owner": pid of the run that started it}: a run killed before it could stop
# its dockerd (e.g. by a test timeout) leaves it; the next run adopts and stops it
DOCKERD_STATE = LOCK_DIR / "marekvs-compose-test.dockerd.json"
PROJECT_PREFIX = "marekvs-test-"


# Run by `python -c` in a one-off container on a stopped node's volume: deletes every record of
# the partition of the key argv[1] from the data column family; prints how many.
DROP_PARTITION = """
import glob, os, sys
from rocksdict import Options, Rdict
from marekvs.core.keys import pid_prefix
from marekvs.core.partition import partition_of
pid = partition_of(sys.argv[1].encode())
path = "/data"  # one process; a node of shard workers: the directory of the worker owning pid
for d in glob.glob("/data/shards/*-*/"):
    first, last = map(int, os.path.basename(d.rstrip("/")).split("-"))
    if first <= pid <= last:
        path = d
cfs = {n: Options(raw_mode=True) for n in Rdict.list_cf(path) if n != "default"}
db = Rdict(path, Options(raw_mode=True), column_families=cfs)
data = db.get_column_family("data")
lo, hi = pid_prefix(pid), pid_prefix(pid + 1)
doomed = []
for k in data.keys(from_key=lo):
    if k >= hi:
        break
    doomed.append(k)
for k in doomed:
    data.delete(k)
del data
db.close()
print(len(doomed))
"""


class Skip(Exception):
    """Docker cannot run on this machine at all."""


class Failed(AssertionError):
    pass


def log(msg: str) -> None:
    print(f"[compose_test {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(args: list[str], timeout: float = 600, check: bool = True,
        env: dict | None = None) -> subprocess.CompletedProcess:
    r = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env, cwd=str(ROOT))
    if check and r.returncode != 0:
        raise Failed(f"{' '.join(args)} exited {r.returncode}:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}")
    return r


def wait_for(pred, timeout: float, what: str, interval: float = 0.1):
    """Poll ``pred`` until it returns something true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = pred()
        except Exception as e:  # noqa: BLE001 - a node restarting: keep polling, report the last error
            last = f"<{type(e).__name__}: {e}>"
        else:
            if last:
                return last
        time.sleep(interval)
    raise Failed(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})")


def free_loopback_ports(n: int) -> list[int]:
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


# -- the engine -------------------------------------------------------------------------------


class Engine:
    """The Docker engine this run uses; ``dockerd`` started here only when none answers."""

    def __init__(self, workdir: Path, storage_driver: str = "auto"):
        self.workdir = workdir
        self.driver_choice = storage_driver
        self.proc: subprocess.Popen | None = None
        self.adopted = 0  # pid of a dockerd an earlier run started and could not stop
        self.lock = None
        self.storage_driver = ""

    @property
    def started_here(self) -> bool:
        return self.proc is not None or bool(self.adopted)

    @staticmethod
    def answers() -> bool:
        try:
            return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def start(self) -> None:
        if shutil.which("docker") is None:
            raise Skip("no docker client (apt-get install docker.io)")
        self.lock = open(ENGINE_LOCK, "a+")
        fcntl.flock(self.lock, fcntl.LOCK_SH)  # every run holds it; the one that started dockerd waits
        if self.answers():
            self._adopt_orphan()
            if not self.adopted:
                log("using the running Docker engine")
            return
        if shutil.which("dockerd") is None:
            raise Skip("no Docker engine answers and dockerd is not installed (apt-get install docker.io)")
        if os.geteuid() != 0:
            raise Skip("no Docker engine answers, and starting dockerd needs root")
        if self.driver_choice != "auto":
            drivers = [self.driver_choice]
        else:  # overlay2 where the kernel has overlayfs (much faster), else vfs (works everywhere)
            drivers = ["overlay2", "vfs"] if _has_overlayfs() else ["vfs"]
        errors = []
        for driver in drivers:
            err = self._start_dockerd(driver)
            if err is None:
                return
            errors.append(f"dockerd --storage-driver={driver}: {err}")
            if self.answers():  # another run started one meanwhile: use it
                log("a Docker engine started meanwhile; using it")
                return
        raise Skip("dockerd cannot run here: " + " | ".join(errors))

    def _start_dockerd(self, driver: str) -> str | None:
        # --iptables=false: no NAT needed (containers talk on their bridge, the host through
        # the loopback ports docker-proxy publishes; the image build uses --network host)
        logf = self.workdir / f"dockerd-{driver}.log"
        args = ["dockerd", "--iptables=false", f"--storage-driver={driver}"]
        log(f"starting {' '.join(args)} (log {logf})")
        with open(logf, "wb") as f:
            self.proc = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = logf.read_text(errors="replace").strip().splitlines()[-3:]
                self.proc = None
                return f"exited {'; '.join(tail)}"
            if self.answers():
                self.storage_driver = driver
                DOCKERD_STATE.write_text(json.dumps({"dockerd": self.proc.pid, "owner": os.getpid()}))
                log(f"dockerd pid {self.proc.pid} answers (storage driver {driver})")
                return None
            time.sleep(0.2)
        self._stop_dockerd()
        return "no answer after 60 s"

    def _stop_dockerd(self) -> None:
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return
        os.kill(p.pid, signal.SIGTERM)
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(10)

    def _adopt_orphan(self) -> None:
        """The running dockerd is one an earlier run started and did not live to stop: this run
        stops it instead (by that pid, only while it is still that dockerd)."""
        try:
            st = json.loads(DOCKERD_STATE.read_text())
            pid, owner = int(st["dockerd"]), int(st["owner"])
        except (OSError, ValueError, KeyError, TypeError):
            return
        if _alive(owner) or not _is_dockerd(pid):
            return
        self.adopted = pid
        DOCKERD_STATE.write_text(json.dumps({"dockerd": pid, "owner": os.getpid()}))
        log(f"using dockerd pid {pid}, which run {owner} started and did not stop; it is stopped at the end")

    def stop(self) -> None:
        """Stop dockerd if this run started it (after any other run using it has finished)."""
        pid = self.proc.pid if self.proc is not None else self.adopted
        if pid:
            assert self.lock is not None
            log(f"waiting for other runs to finish with dockerd pid {pid}")
            fcntl.flock(self.lock, fcntl.LOCK_EX)
            log(f"stopping dockerd pid {pid}")
            if self.proc is not None:
                self._stop_dockerd()
            elif _is_dockerd(pid):
                os.kill(pid, signal.SIGTERM)
                deadline = time.monotonic() + 60
                while _alive(pid) and time.monotonic() < deadline:
                    time.sleep(0.1)
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
            self.adopted = 0
            with contextlib.suppress(OSError):
                DOCKERD_STATE.unlink()
        if self.lock is not None:
            self.lock.close()
            self.lock = None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is gone
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True


def _is_dockerd(pid: int) -> bool:
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return False
    return _alive(pid) and os.path.basename(argv0) == b"dockerd"


def _has_overlayfs() -> bool:
    try:
        return "overlay" in Path("/proc/filesystems").read_text()
    except OSError:
        return False


# -- images -----------------------------------------------------------------------------------


def image_id(ref: str) -> str:
    r = run(["docker", "image", "inspect", "--format", "{{.Id}}", ref], check=False)
    return r.stdout.strip() if r.returncode == 0 else ""


def ensure_base(name: str) -> bool:
    """Build the local base image unless it exists. Returns True when it was built now."""
    if image_id(name):
        return False
    with open(BASE_LOCK, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; another run may have made it
        if image_id(name):
            return False
        if os.geteuid() != 0 or shutil.which("debootstrap") is None:
            raise Failed(f"base image {name} missing, and making it needs root and debootstrap "
                         "(apt-get install debootstrap)")
        log(f"building the base image {name} (debootstrap; cached for later runs)")
        run(["sh", str(DEPLOY / "base-image.sh"), name], timeout=1800)
    return True


def build_image(base: str, tag: str, cache_tag: str, run_tag: str) -> None:
    """The marekvs image as ``tag`` (and ``run_tag``), its build stage as ``cache_tag`` (so the
    layer cache of the dependencies survives); the images these tags replace are removed."""
    old = {t: image_id(t) for t in (cache_tag, tag)}
    common = ["docker", "build", "--force-rm", "--network", "host", "--build-arg", f"BASE_IMAGE={base}", "-f",
              str(DEPLOY / "Dockerfile")]
    run([*common, "--target", "build", "-t", cache_tag, str(ROOT)], timeout=1800)
    run([*common, "-t", tag, "-t", run_tag, str(ROOT)], timeout=1800)
    for t, was in old.items():
        if was and was != image_id(t):
            run(["docker", "rmi", was], check=False)  # refused while in use or tagged elsewhere: fine


def reap_stale_runs() -> list[str]:
    """Remove what runs of this script that no longer exist left behind (a run killed before
    its teardown): containers, networks, volumes and image tags of projects named
    ``marekvs-test-<pid>-...`` whose pid is gone. Returns the projects reaped."""
    def dead(project: str) -> bool:
        pid = project[len(PROJECT_PREFIX):].split("-", 1)[0]
        return pid.isdigit() and not _alive(int(pid))

    lbl = "{{.Label \"com.docker.compose.project\"}}"
    projects: dict[str, dict[str, list[str]]] = {}
    for kind, cmd in (("containers", ["docker", "ps", "-a"]), ("networks", ["docker", "network", "ls"]),
                      ("volumes", ["docker", "volume", "ls"])):
        fmt = "{{.ID}} " + lbl if kind != "volumes" else "{{.Name}} " + lbl
        for line in run([*cmd, "--format", fmt], check=False).stdout.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].startswith(PROJECT_PREFIX) and dead(parts[1]):
                projects.setdefault(parts[1], {}).setdefault(kind, []).append(parts[0])
    for line in run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}", "marekvs"],
                    check=False).stdout.splitlines():
        tag = line.split(":", 1)[-1]
        if tag.startswith(PROJECT_PREFIX) and dead(tag):
            projects.setdefault(tag, {}).setdefault("images", []).append(line)
    for name, kinds in projects.items():
        log(f"removing what the dead run {name} left: {kinds}")
        for kind, rm in (("containers", ["docker", "rm", "-f", "-v"]), ("networks", ["docker", "network", "rm"]),
                         ("volumes", ["docker", "volume", "rm", "-f"]), ("images", ["docker", "rmi"])):
            if kinds.get(kind):
                run([*rm, *kinds[kind]], check=False)
    return sorted(projects)


# -- compose ----------------------------------------------------------------------------------


def compose_command(choice: str) -> list[str]:
    if choice == "v2" or (choice == "auto" and run(["docker", "compose", "version"], check=False).returncode == 0):
        return ["docker", "compose"]
    if choice in ("auto", "v1") and shutil.which("docker-compose"):
        return ["docker-compose"]
    raise Failed(f"no docker compose ({choice}): install docker-compose or the compose v2 plugin")


class Project:
    def __init__(self, compose: list[str], name: str, image: str, ports: list[int], tls_dir: Path | None = None,
                 kafka_ports: list[int] | None = None):
        self.compose, self.name, self.ports = compose, name, ports
        kafka_ports = kafka_ports or free_loopback_ports(3)
        self.files = ["-f", str(COMPOSE_FILE)] + (["-f", str(TLS_FILE)] if tls_dir else [])
        self.env = dict(os.environ)
        if tls_dir:
            self.env["MAREKVS_TLS_DIR"] = str(tls_dir)
        self.env.update({
            "MAREKVS_CLUSTER_SECRET": secrets.token_hex(16),
            "MAREKVS_IMAGE": image,
            "MAREKVS_DURABILITY": "always",
            "MAREKVS_HEALTH_INTERVAL": "1s",  # "healthy" within ~1 s of a start, not 5
            "MAREKVS_NODE1_PORT": str(ports[0]),
            "MAREKVS_NODE2_PORT": str(ports[1]),
            "MAREKVS_NODE3_PORT": str(ports[2]),
            **{f"MAREKVS_NODE{i + 1}_KAFKA_PORT": str(p) for i, p in enumerate(kafka_ports)},
        })

    def __call__(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        return run([*self.compose, "-p", self.name, *self.files, *args], timeout=timeout, check=check,
                   env=self.env)

    def containers(self) -> dict[str, str]:
        """{service: container id} of the project's three nodes."""
        ids = self("ps", "-q").stdout.split()
        if not ids:
            raise Failed("compose ps shows no containers")
        fmt = '{{index .Config.Labels "com.docker.compose.service"}} {{.Id}}'
        r = run(["docker", "inspect", "--format", fmt, *ids])
        out = dict(line.split() for line in r.stdout.splitlines() if line.strip())
        out.pop("certs", None)  # (the TLS variant's one-off: done before the nodes start)
        if sorted(out) != ["node1", "node2", "node3"]:
            raise Failed(f"want containers node1-3, compose has {out}")
        return out

    def inspect(self, cid: str, fmt: str) -> str:
        return run(["docker", "inspect", "--format", fmt, cid]).stdout.strip()

    def wait_healthy(self, cids: dict[str, str] | None = None, timeout: float = 120) -> dict[str, str]:
        """Wait until Docker reports every container running and healthy (its HEALTHCHECK)."""
        cids = cids or self.containers()
        fmt = "{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}"

        def healthy():
            lines = run(["docker", "inspect", "--format", fmt, *cids.values()]).stdout.splitlines()
            states = dict(zip(cids, (ln.strip() for ln in lines)))
            for s, st in states.items():
                if st.split()[0] in ("exited", "dead") or st.endswith("unhealthy"):
                    raise Failed(f"{s} is {st}:\n{self.logs(cids[s])}")
            return states if all(st == "running healthy" for st in states.values()) else None

        wait_for(healthy, timeout, "every container healthy", interval=0.2)
        return cids

    def logs(self, cid: str, tail: int = 40) -> str:
        r = run(["docker", "logs", "--tail", str(tail), cid], check=False)
        return (r.stdout + r.stderr).strip()

    def leftovers(self) -> dict[str, list[str]]:
        label = f"label=com.docker.compose.project={self.name}"
        out = {
            "containers": run(["docker", "ps", "-aq", "--filter", label]).stdout.split(),
            "networks": run(["docker", "network", "ls", "-q", "--filter", label]).stdout.split(),
            "volumes": run(["docker", "volume", "ls", "-q", "--filter", label]).stdout.split(),
        }
        # volumes by name too (whatever labels this compose version puts on them)
        names = run(["docker", "volume", "ls", "-q"]).stdout.split()
        out["volumes"] = sorted(set(out["volumes"]) | {v for v in names if v.startswith(self.name + "_")})
        return {k: v for k, v in out.items() if v}


# -- checks from the host ---------------------------------------------------------------------


def client(port: int, **kw):
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    kw.setdefault("socket_timeout", 10)
    return redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=2, retry=Retry(NoBackoff(), 0), **kw)


def digests(ports: list[int]) -> list[bytes]:
    out = []
    for p in ports:
        with client(p) as c:
            out.append(c.execute_command("DEBUG", "DIGEST"))
    return out


def wait_converged(ports: list[int], timeout: float = 120) -> bytes:
    """All DEBUG DIGESTs equal, twice in a row."""
    prev: list[bytes | None] = [None]

    def same():
        d = digests(ports)
        if len(set(d)) == 1 and prev[0] == d[0]:
            return d[0]
        prev[0] = d[0] if len(set(d)) == 1 else None
        return None

    return wait_for(same, timeout, f"equal DEBUG DIGEST on {ports}", interval=0.2)


def missing(port: int, expected: dict[str, str]) -> dict[str, object]:
    keys = list(expected)
    got = {}
    with client(port) as c:
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            got.update(zip(chunk, c.mget(chunk)))
    return {k: got[k] for k in keys if got[k] != expected[k].encode()}


def kafka_round_trip(kafka_ports: list[int], tls_dir: Path | None = None) -> None:
    """A record produced (acks=all) through node 1's published Kafka port is read through
    node 3's: every node advertises 127.0.0.1 and its published port (with ``tls_dir``: over
    SSL, presenting the cluster's client certificate)."""
    from confluent_kafka import Consumer, Producer

    ssl = {} if tls_dir is None else {
        "security.protocol": "SSL", "ssl.ca.location": str(tls_dir / "ca.pem"),
        "ssl.certificate.location": str(tls_dir / "client.pem"), "ssl.key.location": str(tls_dir / "client.key")}
    p = Producer({"bootstrap.servers": f"127.0.0.1:{kafka_ports[0]}", "acks": "all", "message.timeout.ms": 60000,
                  **ssl})
    p.produce("compose", key=b"k", value=b"from the host")
    if p.flush(90) != 0:
        raise Failed("the Kafka produce through node 1 was not acknowledged")
    c = Consumer({"bootstrap.servers": f"127.0.0.1:{kafka_ports[2]}", "group.id": "compose",
                  "auto.offset.reset": "earliest", **ssl})
    c.subscribe(["compose"])
    try:
        m = wait_for(lambda: (lambda m: m if m is not None and m.error() is None else None)(c.poll(0.5)), 90,
                     "the record read through node 3's Kafka port")
    finally:
        c.close()
    if (m.key(), m.value()) != (b"k", b"from the host"):
        raise Failed(f"read {m.key()!r} {m.value()!r} through node 3")
    print(f"Kafka{' over SSL' if tls_dir else ''}: produced on 127.0.0.1:{kafka_ports[0]}, read on "
          f"127.0.0.1:{kafka_ports[2]}", flush=True)


def redis_cli(port: int, *args: str, tls_dir: Path | None = None) -> str:
    tls = [] if tls_dir is None else ["--tls", "--cacert", str(tls_dir / "ca.pem"), "--cert",
                                      str(tls_dir / "client.pem"), "--key", str(tls_dir / "client.key")]
    return run(["redis-cli", *tls, "-h", "127.0.0.1", "-p", str(port), *args], timeout=30).stdout.strip()


def info_section(port: int, section: str) -> dict[str, str]:
    with client(port) as c:
        return {k: str(v) for k, v in c.info(section).items()}


def cluster_status(ports: list[int], tls_dir: Path | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    r = run([sys.executable, "-m", "marekvs", "cluster", "status", "--json", "--ports",
             ",".join(map(str, ports)), *(["--tls-dir", str(tls_dir)] if tls_dir else [])], check=False, env=env)
    return json.loads(r.stdout) if r.stdout.strip() else {}


def all_streaming(ports: list[int], tls_dir: Path | None = None):
    st = cluster_status(ports, tls_dir)
    nodes = st.get("nodes", [])
    links = [(s["id"], ln["peer"], ln["state"]) for s in nodes for ln in s["links"]]
    ok = (len(nodes) == 3 and all(s["up"] for s in nodes) and len(links) == 6
          and all(state == "streaming" for _, _, state in links)
          and {s["id"] for s in nodes} == {1, 2, 3})
    return st if ok else None


class Writer(threading.Thread):
    """Unique keys ``<prefix>:<n>`` to one node, one SET per round trip; records the
    acknowledged ones. A connection error is not an acknowledgement: redial, new key."""

    def __init__(self, port: int, prefix: str):
        super().__init__(daemon=True)
        self.port, self.prefix = port, prefix
        self.acked: dict[str, str] = {}
        self.errors = 0
        self.halt = threading.Event()

    def run(self) -> None:
        import redis

        c = None
        n = 0
        while not self.halt.is_set():
            key, val = f"{self.prefix}:{n}", f"{self.prefix}-{n}"
            n += 1
            try:
                if c is None:
                    c = client(self.port, socket_timeout=3)
                if c.set(key, val) is True:
                    self.acked[key] = val
            except (redis.ConnectionError, redis.TimeoutError):
                self.errors += 1
                c = None
                self.halt.wait(0.05)
        if c is not None:
            c.close()

    def stop(self) -> None:
        self.halt.set()
        self.join(30)


# -- the run ----------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ports", default="", help="three free loopback ports for RESP (default: picked)")
    ap.add_argument("--kafka-ports", default="", help="three free loopback ports for Kafka (default: picked)")
    ap.add_argument("--project", default="", help="compose project name (default: unique)")
    ap.add_argument("--compose", choices=["auto", "v2", "v1"], default="auto",
                    help="compose v2 (`docker compose`) or 1.x (`docker-compose`); auto: v2 when present")
    ap.add_argument("--report", default="", help="write the steps' durations (s) as JSON here")
    ap.add_argument("--storage-driver", choices=["auto", "overlay2", "vfs"], default="auto",
                    help="for a dockerd started here (auto: overlay2 when the kernel has overlayfs, else vfs)")
    ap.add_argument("--keep-on-failure", action="store_true", help="leave the containers up when a check fails")
    args = ap.parse_args()

    ports = [int(p) for p in args.ports.split(",")] if args.ports else free_loopback_ports(3)
    kafka_ports = [int(p) for p in args.kafka_ports.split(",")] if args.kafka_ports else free_loopback_ports(3)
    if len(ports) != 3 or len(kafka_ports) != 3:
        ap.error("--ports and --kafka-ports want three ports each")
    project = args.project or f"{PROJECT_PREFIX}{os.getpid()}-{secrets.token_hex(3)}"
    recipe = hashlib.sha256((DEPLOY / "base-image.sh").read_bytes()).hexdigest()[:12]
    base = f"marekvs-base:bookworm-{recipe}"  # a changed recipe makes a new base image
    run_tag = f"marekvs:{project}"
    timings: dict[str, float] = {}
    info: dict[str, object] = {"project": project, "ports": ports, "kafka_ports": kafka_ports, "base_image": base}
    workdir = Path(tempfile.mkdtemp(prefix=f"{project}-"))
    engine = Engine(workdir, args.storage_driver)
    proj: Project | None = None
    projects: list[Project] = []
    failed = True
    t_all = time.monotonic()

    @contextlib.contextmanager
    def step(name: str):
        t0 = time.monotonic()
        log(f"-- {name}")
        yield
        timings[name] = round(time.monotonic() - t0, 1)
        log(f"   {name}: {timings[name]} s")

    try:
        with step("1. engine"):
            engine.start()
    except Skip as e:  # nothing was made: nothing to tear down
        engine.stop()
        print(f"SKIP: {e}", file=sys.stderr, flush=True)
        shutil.rmtree(workdir, ignore_errors=True)
        return SKIP
    try:
        with step("1. engine"):
            info["started_dockerd"] = engine.started_here
            info["reaped"] = reap_stale_runs()
            info["storage_driver"] = engine.storage_driver or run(
                ["docker", "info", "--format", "{{.Driver}}"]).stdout.strip()
            info["server_version"] = run(["docker", "version", "--format", "{{.Server.Version}}"]).stdout.strip()
        with step("1. base image"):
            info["base_built"] = ensure_base(base)
        with step("1. marekvs image"):
            build_image(base, "marekvs:test", "marekvs-build:test", run_tag)
            info["image_size_bytes"] = int(run(["docker", "image", "inspect", "--format", "{{.Size}}",
                                                run_tag]).stdout.strip())
            info["base_size_bytes"] = int(run(["docker", "image", "inspect", "--format", "{{.Size}}",
                                               base]).stdout.strip())
        compose = compose_command(args.compose)
        info["compose"] = " ".join(compose) + " " + run([*compose, "version", "--short"], check=False).stdout.strip()
        proj = Project(compose, project, run_tag, ports, kafka_ports=kafka_ports)
        projects.append(proj)

        with step("2. up until healthy"):
            proj("config", "--quiet")
            proj("up", "-d", "--no-build")
            cids = proj.wait_healthy()
            for s, cid in cids.items():
                published = json.loads(proj.inspect(cid, "{{json .NetworkSettings.Ports}}"))
                hosts = {(b["HostIp"], b["HostPort"]) for bind in published.values() if bind for b in bind}
                want = {("127.0.0.1", str(ports[int(s[-1]) - 1])), ("127.0.0.1", str(kafka_ports[int(s[-1]) - 1]))}
                if hosts != want:
                    raise Failed(f"{s} publishes {published}, want only {want}")
                uid = run(["docker", "exec", cid, "id", "-u"]).stdout.strip()
                if uid != "10001":
                    raise Failed(f"{s} runs as uid {uid}, not the image's user marekvs (10001)")

        with step("3. replication from the host"):
            assert redis_cli(ports[0], "SET", "greeting", "hello") == "OK"
            for p in ports[1:]:
                wait_for(lambda p=p: redis_cli(p, "GET", "greeting") == "hello", 30, f"greeting on {p}")
            with client(ports[0]) as c:
                pipe = c.pipeline(transaction=False)
                for i in range(500):
                    pipe.set(f"bulk:{i}", f"v{i}")
                pipe.execute()
            wait_converged(ports, 60)
            for p in ports[1:]:
                gone = missing(p, {f"bulk:{i}": f"v{i}" for i in range(500)})
                if gone:
                    raise Failed(f"node on {p} misses {len(gone)} of node 1's keys")

            per_node = 300

            def incr(port: int) -> None:
                with client(port) as c:
                    for _ in range(per_node):
                        c.incr("counter")

            threads = [threading.Thread(target=incr, args=(p,)) for p in ports]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            want = str(3 * per_node)
            for p in ports:
                wait_for(lambda p=p: redis_cli(p, "GET", "counter") == want, 60, f"counter = {want} on {p}")
            st = wait_for(lambda: all_streaming(ports), 60, "every link streaming in `marekvs cluster status`")
            info["cluster_status"] = [{"id": s["id"], "links": [(ln["peer"], ln["state"]) for ln in s["links"]]}
                                      for s in st["nodes"]]
            env = dict(os.environ, PYTHONPATH=str(ROOT))
            print(run([sys.executable, "-m", "marekvs", "cluster", "status", "--ports", ",".join(map(str, ports))],
                      env=env).stdout, flush=True)

        with step("3b. Kafka from the host"):
            kafka_round_trip(kafka_ports)

        with step("4. docker kill under load, restart, converge"):
            writers = [Writer(p, f"load{i + 1}") for i, p in enumerate(ports)]
            for w in writers:
                w.start()
            wait_for(lambda: all(len(w.acked) >= 200 for w in writers), 60, "200 acknowledged writes per node")
            victim = cids["node3"]
            log(f"   acked so far {[len(w.acked) for w in writers]}; docker kill node3")
            run(["docker", "kill", victim])
            wait_for(lambda: proj.inspect(victim, "{{.State.Status}}") != "running", 30, "node3 killed")
            # node 3's own writer keeps going: it fails while node 3 is down, and whatever node 3
            # acknowledges after its restart must reach its peers like everything else
            info["killed_exit_code"] = int(proj.inspect(victim, "{{.State.ExitCode}}"))
            during = [len(w.acked) for w in writers[:2]]
            wait_for(lambda: all(len(w.acked) >= d + 200 for w, d in zip(writers, during)), 60,
                     "200 more writes on nodes 1 and 2 while node 3 is down")
            log(f"   acked so far {[len(w.acked) for w in writers]}; starting node3")
            proj("start", "node3")
            proj.wait_healthy(cids)
            log("   node3 healthy again")
            after = [len(w.acked) for w in writers]
            wait_for(lambda: all(len(w.acked) >= a + 100 for w, a in zip(writers, after)), 60,
                     "100 more writes on every node after node 3 is back")
            for w in writers:
                w.stop()
            acked = {k: v for w in writers for k, v in w.acked.items()}
            info["kill_acked_writes"] = {w.prefix: len(w.acked) for w in writers}
            info["kill_failed_writes"] = {w.prefix: w.errors for w in writers}
            log(f"   writers stopped, acked {info['kill_acked_writes']}")
            t0 = time.monotonic()
            wait_converged(ports, 120)
            info["kill_converge_s"] = round(time.monotonic() - t0, 2)
            for p in ports:
                gone = missing(p, acked)
                if gone:
                    raise Failed(f"node on {p} lost {len(gone)} of {len(acked)} acknowledged writes, "
                                 f"e.g. {list(gone.items())[:5]}")

        with step("5. anti-entropy repairs files a node lost"):
            # Behind the engine's back (node 3 stopped, a one-off container on its volume):
            # every record of greeting's partition is deleted from node 3's RocksDB, as a disk
            # that lost files would. Log shipping cannot bring them back (they were delivered
            # long ago); `marekvs repair --verify`, run inside the compose network, does.
            proj("stop", "node3", timeout=120)
            dropped = proj("run", "--rm", "--no-deps", "-T", "--entrypoint", "python", "node3", "-c",
                           DROP_PARTITION, "greeting", timeout=300).stdout.strip().splitlines()[-1]
            info["ae_records_dropped"] = int(dropped)
            if int(dropped) < 1:
                raise Failed(f"dropping greeting's partition on node 3 removed {dropped} records")
            proj("start", "node3")
            proj.wait_healthy(cids)
            if redis_cli(ports[2], "GET", "greeting") != "":
                raise Failed("node 3 still serves greeting after its partition was dropped")
            t0 = time.monotonic()
            rep = proj("exec", "-T", "node1", "marekvs", "repair", "--nodes",
                       "node1:16379,node2:16379,node3:16379", "--verify", "--settle", "0", "--no-progress",
                       timeout=600, check=False)
            info["ae_repair_exit"] = rep.returncode
            info["ae_repair_s"] = round(time.monotonic() - t0, 2)
            print(rep.stdout, flush=True)
            # 1: it found the difference and repaired it. 0: consistent already, which is right
            # only if the nodes' own background exchange (its digest verifier runs on a timer)
            # got there first: then some node counts the records it repaired.
            if rep.returncode == 0:
                repaired = sum(int(info_section(p, "antientropy").get("records_repaired", 0)) for p in ports)
                info["ae_repaired_in_background"] = repaired
                if repaired < 1:
                    raise Failed(f"marekvs repair found nothing to repair and no node repaired anything:\n{rep.stdout}")
            elif rep.returncode != 1:
                raise Failed(f"marekvs repair exited {rep.returncode} (want 1: repaired):\n{rep.stdout}\n{rep.stderr}")
            wait_converged(ports, 120)
            if redis_cli(ports[2], "GET", "greeting") != "hello":
                raise Failed("node 3 did not get greeting back from the repair")
            gone = missing(ports[2], acked)
            if gone:
                raise Failed(f"node 3 misses {len(gone)} acknowledged writes after the repair")

        with step("6. stop, down, up: the volumes keep the data"):
            digest_before = wait_converged(ports, 60)
            with client(ports[0]) as c:
                size_before = c.dbsize()
            proj("stop", timeout=120)
            for s, cid in cids.items():
                code = proj.inspect(cid, "{{.State.ExitCode}}")
                logs = proj.logs(cid, tail=5)
                if code != "0" or "stopped cleanly" not in logs:
                    raise Failed(f"{s} did not stop cleanly on SIGTERM (exit {code}):\n{logs}")
            proj("down", timeout=120)
            if proj.leftovers().get("containers"):
                raise Failed(f"containers left after down: {proj.leftovers()}")
            vols = proj.leftovers().get("volumes", [])
            if len(vols) != 3:
                raise Failed(f"want the 3 data volumes kept by `down`, have {vols}")
            proj("up", "-d", "--no-build")
            cids = proj.wait_healthy()
            if digests(ports) != [digest_before] * 3:
                raise Failed(f"DEBUG DIGEST after down/up {digests(ports)} != before {digest_before!r}")
            for p in ports:
                with client(p) as c:
                    if c.dbsize() != size_before:
                        raise Failed(f"DBSIZE on {p} after down/up {c.dbsize()} != {size_before}")
                    if c.get("counter") != str(3 * per_node).encode() or c.get("greeting") != b"hello":
                        raise Failed(f"node on {p} lost counter/greeting across down/up")
                gone = missing(p, acked)
                if gone:
                    raise Failed(f"node on {p} lost {len(gone)} acknowledged writes across down/up")
            wait_for(lambda: all_streaming(ports), 60, "every link streaming again after up")

        with step("7. the TLS variant: clients over TLS, peers over mutual TLS"):
            proj("down", "-v", "--timeout", "30", timeout=180)
            tls_dir = workdir / "tls"
            proj = Project(compose, project + "-tls", run_tag, ports, tls_dir=tls_dir, kafka_ports=kafka_ports)
            projects.append(proj)
            proj("config", "--quiet")
            proj("up", "-d", "--no-build")
            cids = proj.wait_healthy()
            if redis_cli(ports[0], "SET", "greeting", "over tls", tls_dir=tls_dir) != "OK":
                raise Failed("redis-cli --tls SET on node 1 failed")
            wait_for(lambda: redis_cli(ports[2], "GET", "greeting", tls_dir=tls_dir) == "over tls", 60,
                     "node 1's write on node 3 over TLS")
            with socket.create_connection(("127.0.0.1", ports[1]), timeout=30) as s:
                s.sendall(b"PING\r\n")
                if s.recv(64):
                    raise Failed("node 2 answered plaintext RESP on its TLS-only port")
            wait_for(lambda: all_streaming(ports, tls_dir), 60, "every link streaming (over mutual TLS)")
            kafka_round_trip(kafka_ports, tls_dir)  # Kafka over SSL too
        failed = False
    except (Failed, AssertionError, subprocess.TimeoutExpired, OSError) as e:
        print(f"FAILED: {e}", file=sys.stderr, flush=True)
        if proj is not None:
            for cid in proj("ps", "-q", check=False).stdout.split():
                print(f"--- container {cid[:12]} logs ---\n{proj.logs(cid)}", file=sys.stderr, flush=True)
    finally:
        if not (failed and args.keep_on_failure):
            try:
                with step("8. teardown"):
                    for p in projects:
                        p("down", "-v", "--remove-orphans", "--timeout", "30", timeout=180, check=False)
                        left = p.leftovers()
                        if left:
                            print(f"FAILED: left after down -v: {left}", file=sys.stderr, flush=True)
                            failed = True
                    if image_id(run_tag):
                        run(["docker", "rmi", run_tag], check=False)
            finally:
                engine.stop()
        timings["total"] = round(time.monotonic() - t_all, 1)
        info["timings_s"] = timings
        info["passed"] = not failed
        log("summary: " + json.dumps(info))
        if args.report:
            Path(args.report).write_text(json.dumps(info, indent=2) + "\n")
        if not failed:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            log(f"dockerd logs (if started here) are in {workdir}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
