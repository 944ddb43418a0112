"""A private Redis Cluster for the tests: ``redis-server --cluster-enabled yes`` on free ports, joined with
``redis-cli --cluster create``, ended by PID. Never the shared Redis on 6379."""

from __future__ import annotations

import random
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    """A free port whose cluster bus port (+10000) is free too, both below the kernel's ephemeral range
    (32768 and up), so that no outgoing connection of a parallel test takes either between this check and
    the node's bind."""
    while True:
        port = random.randrange(10000, 22000)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 10000))
            return port
        except OSError:
            continue


def _cli(port: int, *args: str, timeout: float = 10) -> str:
    out = subprocess.run(
        ["redis-cli", "-p", str(port), *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    return out.stdout


@dataclass
class LocalCluster:
    """``masters`` masters, each with ``replicas`` replicas, in ``root``."""

    root: Path
    masters: int = 3
    replicas: int = 0
    node_timeout_ms: int = 1000
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in list(self.procs)[: self.masters])

    def start(self) -> LocalCluster:
        try:
            return self._start()
        except BaseException:
            self.stop()  # nothing left running when the cluster could not be made
            raise

    def _start(self) -> LocalCluster:
        exe = shutil.which("redis-server")
        if exe is None or shutil.which("redis-cli") is None:
            raise RuntimeError("redis-server and redis-cli are needed for the Redis Cluster tests")
        ports = [self._start_node(exe) for _ in range(self.masters * (1 + self.replicas))]
        if len(ports) == 1:  # redis-cli --cluster create wants three masters: one node takes every slot
            _cli(ports[0], "cluster", "addslotsrange", "0", "16383")
        else:
            subprocess.run(
                ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
                 "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                capture_output=True, timeout=60, check=True,
            )
        for port in ports:
            self._wait(lambda p=port: "cluster_state:ok" in _cli(p, "cluster", "info"), "the cluster is not ok")
        if self.replicas:
            self._wait(lambda: len(self.replica_ports()) == self.masters * self.replicas, "replicas missing")
            for port in self.master_ports():  # each replica has done its first sync
                self._wait(
                    lambda p=port: _cli(p, "info", "replication").count("state=online") == self.replicas,
                    f"the replicas of {port} are not in sync",
                )
        return self

    def _start_node(self, exe: str) -> int:
        """One node on a free port, answering; on a new port if it lost its port to another process."""
        for _ in range(3):
            port = free_port()
            (self.root / str(port)).mkdir(parents=True)
            self._spawn(exe, port)
            proc = self.procs[port]
            self._wait(lambda p=port, n=proc: n.poll() is not None or _cli(p, "ping").strip() == "PONG",
                       f"node {port} did not start")
            if proc.poll() is None:
                return port
            del self.procs[port]
        raise RuntimeError("three Redis Cluster nodes in a row could not bind their ports")

    def _spawn(self, exe: str, port: int) -> None:
        self.procs[port] = subprocess.Popen(
            [exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(self.root / str(port)), "--save", "",
             "--appendonly", "no", "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
             "--cluster-node-timeout", str(self.node_timeout_ms)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def restart(self, port: int) -> None:
        """Start a killed node again (its nodes.conf makes it rejoin, as a replica if it was failed over)."""
        self._spawn(shutil.which("redis-server") or "redis-server", port)

    def role(self, port: int) -> str:
        return _cli(port, "role").split("\n", 1)[0].strip()

    def replica_ports(self) -> list[int]:
        return [p for p, proc in self.procs.items() if proc.poll() is None and self.role(p) == "slave"]

    def master_ports(self) -> list[int]:
        return [p for p, proc in self.procs.items() if proc.poll() is None and self.role(p) == "master"]

    def master_of(self, key: str) -> int:
        """The port of the master serving ``key``'s slot now."""
        import redis
        from redis.crc import key_slot

        slot = key_slot(key.encode())
        for port in self.master_ports():
            client = redis.Redis(port=port, socket_timeout=5)
            try:
                for start, end, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
                    if int(start) <= slot <= int(end):
                        return int(primary[1])
            finally:
                client.close()
        raise RuntimeError(f"no master serves {key!r}")

    def kill(self, port: int) -> None:
        """SIGKILL one node, by its PID."""
        proc = self.procs[port]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()

    @staticmethod
    def _wait(ok: object, message: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ok():  # type: ignore[operator]
                return
            time.sleep(0.1)
        raise RuntimeError(message)
