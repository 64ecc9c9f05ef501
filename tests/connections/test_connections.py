"""Hostile connections against a real `latchkey serve`, from another process: idle sockets, dribbled requests, more
clients than the process has descriptors, and malformed chunked bodies. Each test prints its figures."""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from latchkey_process import serve as serve_latchkey  # noqa: E402


@contextmanager
def serve(settings: dict[str, str], dev: bool = False, open_files: int | None = None):
    """The shared `serve`, yielding (port, process); no line of its output may say it ran out of descriptors."""
    with serve_latchkey(settings, dev=dev, open_files=open_files, prefix="latchkey-connections-") as served:
        yield served.port, served.process
    assert not any("Too many open files" in line for line in served.output), "".join(served.output)


def request(port: int, raw: bytes, timeout: float = 10.0) -> tuple[int, dict]:
    """Sends `raw` on a new connection; the status and JSON body of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(raw)
        data = b""
        while b"\r\n\r\n" not in data or len(data) < data.index(b"\r\n\r\n") + 4 + content_length(data):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body) if body.strip().startswith(b"{") else {}


def content_length(data: bytes) -> int:
    match = re.search(rb"(?im)^content-length:\s*(\d+)", data.split(b"\r\n\r\n", 1)[0])
    return int(match.group(1)) if match else 0


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes `sock` within `seconds` (reading nothing but the close)."""
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except socket.timeout:
        return False
    except ConnectionResetError:
        return True


def healthz(port: int, timeout: float) -> int:
    return request(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout=timeout)[0]


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_idle_connections_are_closed_within_the_idle_timeout():
    with serve({"LATCHKEY_HTTP_IDLE_TIMEOUT": "2"}) as (port, _):
        start = time.monotonic()
        sockets = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(1000)]
        opened = time.monotonic() - start
        remaining = list(sockets)
        deadline = start + opened + 2 + 8
        closed = 0
        for sock in remaining:
            if closed_within(sock, max(0.01, deadline - time.monotonic())):
                closed += 1
        elapsed = time.monotonic() - start
        for sock in sockets:
            sock.close()
        print(f"\n1000 idle connections (opened in {opened:.2f} s): {closed} closed by the server {elapsed:.2f} s after the first")
        assert closed == 1000
        assert healthz(port, 5) == 200


def test_a_dribbled_request_is_cut_off():
    with serve({"LATCHKEY_HTTP_READ_TIMEOUT": "2", "LATCHKEY_HTTP_IDLE_TIMEOUT": "60"}) as (port, _):
        for name, complete_head in (("head", False), ("body", True)):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                start = time.monotonic()
                if complete_head:
                    sock.sendall(b"POST /v1/token HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n")
                payload = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100 if not complete_head else b"{" + b" " * 99
                sent = 0
                cut = False
                for byte in payload:
                    try:
                        sock.sendall(bytes([byte]))
                        sent += 1
                    except (BrokenPipeError, ConnectionResetError):
                        cut = True
                        break
                    if closed_within(sock, 1.0):
                        cut = True
                        break
                    if time.monotonic() - start > 8:
                        break
                elapsed = time.monotonic() - start
                print(f"\na {name} dribbled a byte a second: cut off after {elapsed:.1f} s ({sent} bytes)")
                assert cut, f"the dribbled {name} was still open after {elapsed:.1f} s"
                assert elapsed < 5
        assert healthz(port, 5) == 200


def test_more_clients_than_descriptors_wait_and_the_server_recovers():
    # 512 files: the cap derived from it is 256 connections, leaving the rest for the database and logs.
    with serve({}, open_files=512) as (port, process):
        sockets = []
        for _ in range(700):
            try:
                sockets.append(socket.create_connection(("127.0.0.1", port), timeout=0.5))
            except OSError:
                break  # the backlog is full: connecting waits, which is the point
        time.sleep(1)
        held = descriptors(process.pid)
        print(f"\n{len(sockets)} clients connected; the server holds {held} descriptors of 512")
        # Without the cap the server takes every client until accept fails at 512.
        assert held <= 512 - 128, f"the server holds {held} of its 512 descriptors"
        start = time.monotonic()
        try:
            waiting = healthz(port, 1.0)
        except OSError:
            waiting = None
        print(f"a new request while the cap is reached: {waiting or 'waits'} after {time.monotonic() - start:.2f} s")
        for sock in sockets:
            sock.close()
        closed = time.monotonic()
        status = None
        while time.monotonic() - closed < 5 and status != 200:
            try:
                status = healthz(port, 1.0)
            except OSError:
                time.sleep(0.1)
        recovered = time.monotonic() - closed
        print(f"/healthz answered {status} {recovered:.2f} s after the clients closed")
        assert status == 200 and recovered < 5
        assert process.poll() is None


@pytest.mark.parametrize("size", [b"zz", b"-1", b"FFFFFFFFFFFFFFFFFF"])
def test_a_malformed_chunked_body_is_a_400(size):
    with serve({}, dev=True) as (port, _):
        for path in ("/v1/token", "/v1/auth/google", "/v1/apple/notifications"):
            raw = (
                b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + size + b"\r\n{}\r\n0\r\n\r\n"
            )
            status, body = request(port, raw)
            assert status == 400, f"{path} with chunk size {size!r}: {status} {body}"
            assert body.get("error") == "invalid_request", body
