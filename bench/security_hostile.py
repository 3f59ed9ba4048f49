"""Hostile input on the security listeners of `kgroups serve`: fresh connections each sending
a malformed SASL exchange (a random or truncated token, an unknown mechanism, a request before
authenticating) or TLS garbage, from several threads, while an authenticated client keeps
committing. Checks, then reports: the broker is alive, every rejection was logged exactly once,
nothing was answered before authentication, the honest client never failed; and the rejection
rate, the honest client's commit rate meanwhile, and the broker's resident memory.

Run: .venv/bin/python bench/security_hostile.py [--connections 100000] [--threads 4]
"""

from __future__ import annotations

import argparse
import random
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from tests.broker.broker_wire_helpers import metadata_request, nested_of, request_of
from tests.broker.security_helpers import jaas_users, make_certificates

from broker_data import free_port
from kgroups.broker.wire import encode_request
from kgroups.tools.client_security import ClientSecurity

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def hostile_bytes(rng: random.Random) -> tuple[bytes, bool, bool]:
    """One connection's bytes, whether they are for the TLS listener, and whether the broker
    must answer nothing (a request that needs authentication)."""
    kind = rng.randrange(5)
    token = rng.randbytes(rng.randrange(0, 300))
    if kind == 0:  # a valid handshake, then a random token
        return (encode_request(1, "h", SaslHandshakeRequest(mechanism=rng.choice(MECHANISMS)))
                + encode_request(2, "h", SaslAuthenticateRequest(auth_bytes=token)), False, False)
    if kind == 1:  # an unknown mechanism
        return (encode_request(1, "h", SaslHandshakeRequest(mechanism=token.hex()[:40])), False,
                False)
    if kind == 2:  # a request before authenticating
        return encode_request(1, "h", metadata_request(all_topics=True)), False, True
    if kind == 3:  # a frame of random bytes naming an API that needs authentication
        if len(token) >= 2:
            token = struct.pack(">H", rng.choice([0, 1, 3, 8, 9, 11, 42])) + token[2:]
        return struct.pack(">i", len(token)) + token, False, True
    return rng.choice([b"GET / HTTP/1.1\r\n\r\n", struct.pack(">BHH", 22, 0x0301, len(token))
                       + token]), True, False


def wait_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    """Until the port accepts: SASL keeps everything else from an anonymous probe."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("kgroups serve did not start")


def attack(port: int, tls_port: int, count: int, seed: int, answered: list[int]) -> None:
    rng = random.Random(seed)
    for _ in range(count):
        payload, tls, silent = hostile_bytes(rng)
        with socket.create_connection(("127.0.0.1", tls_port if tls else port), timeout=30) as s:
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)  # nothing more: a stalled TLS record ends here
            received = b""
            while chunk := s.recv(65536):
                received += chunk
            if silent and received:
                answered.append(1)


def honest_client(port: int, ca: Path, stop: threading.Event, commits: list[float],
                  failures: list[str]) -> None:
    security = ClientSecurity(protocol="SASL_SSL", mechanism="PLAIN", username="admin",
                              password="admin-secret", truststore=str(ca))
    commit = request_of(8, 8, group_id="honest", generation_id_or_member_epoch=-1, member_id="",
                        group_instance_id=None, topics=(nested_of(
                            8, 8, "OffsetCommitRequestTopic", name="t", partitions=(nested_of(
                                8, 8, "OffsetCommitRequestPartition", partition_index=0,
                                committed_offset=1, committed_leader_epoch=-1,
                                committed_metadata=""),)),))
    try:
        with security.connect("127.0.0.1", port, timeout=30) as client:
            client.call(metadata_request("t"))
            while not stop.is_set():
                client.call(commit)
                commits.append(time.monotonic())
    except Exception as exc:  # the figure to report: any failure of the honest client
        failures.append(repr(exc))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connections", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="security-hostile-") as tmp:
        workdir = Path(tmp)
        certs = make_certificates(workdir / "certs")
        port, tls_port = free_port(), free_port()
        settings = {
            "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{tls_port}",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.server),
            "sasl.enabled.mechanisms": ",".join(MECHANISMS),
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas_users(a="b"),
            "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas_users(admin="admin-secret"),
            "connection.failed.authentication.delay.ms": "0",
        }
        log_path = workdir / "serve.log"
        command = [sys.executable, "-m", "kgroups.cli", "serve", "--data-dir",
                   str(workdir / "data"), "--log-level", "WARNING",
                   *(a for k, v in settings.items() for a in ("--override", f"{k}={v}"))]
        with log_path.open("wb") as log:
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
        try:
            wait_listening(port, process)
            stop, commits, failures, answered = threading.Event(), [], [], []
            honest = threading.Thread(target=honest_client,
                                      args=(tls_port, certs.ca, stop, commits, failures))
            honest.start()
            per_thread = args.connections // args.threads
            began = time.monotonic()
            threads = [threading.Thread(target=attack, args=(port, tls_port, per_thread, seed,
                                                             answered))
                       for seed in range(args.threads)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            elapsed = time.monotonic() - began
            stop.set()
            honest.join()
            time.sleep(1)
            alive = process.poll() is None
            rss_kib = int(next(line.split()[1] for line in
                               Path(f"/proc/{process.pid}/status").read_text().splitlines()
                               if line.startswith("VmRSS"))) if alive else 0
        finally:
            process.terminate()
            process.wait(timeout=30)
        log_text = log_path.read_text(errors="replace")
        rejections = sum(("connection_closed" in line) for line in log_text.splitlines())
        total = per_thread * args.threads
        print(f"{total} hostile connections in {elapsed:.1f} s: {total / elapsed:,.0f}/s; "
              f"broker alive: {alive}; rejection log lines: {rejections}; answered before "
              f"authentication: {len(answered)}; honest client: {len(commits)} commits "
              f"({len(commits) / elapsed:,.0f}/s), failures {failures}; broker RSS "
              f"{rss_kib / 1024:.0f} MiB")
        if not alive or answered or failures or rejections != total:
            raise SystemExit("FAILED")


if __name__ == "__main__":
    main()
