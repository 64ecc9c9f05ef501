"""The `latchkey serve --dev` process the browser-flow tests run against (one per test module)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

DEFAULT_BIN = str(Path(__file__).resolve().parents[2] / ".build" / "debug" / "latchkey")
STARTUP_TIMEOUT = 30.0

LISTENING = re.compile(r"Latchkey listening on (http://127\.0\.0\.1:(\d+))")


@dataclass
class Server:
    base_url: str
    emulator_url: str
    process: subprocess.Popen
    output: list = field(default_factory=list)

    def url(self, path: str) -> str:
        return self.base_url + path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    """`latchkey serve --dev` in a fresh temporary directory with its own SQLite database."""
    binary = os.environ.get("LATCHKEY_BIN", DEFAULT_BIN)
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        pytest.fail(f"latchkey binary not found or not executable: {binary} (set LATCHKEY_BIN)")

    port, emulator_port = free_port(), free_port()
    while emulator_port == port:
        emulator_port = free_port()
    with tempfile.TemporaryDirectory(prefix="latchkey-browser-") as workdir:
        process = subprocess.Popen(
            [binary, "serve", "--dev", "--port", str(port), "--emulator-port", str(emulator_port)],
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            env={**os.environ, "LATCHKEY_DATABASE_URL": os.path.join(workdir, "db.sqlite")},
        )
        output: list[str] = []
        found: dict[str, str] = {}
        ready = threading.Event()

        def pump() -> None:
            # Drains the pipe for the server's whole life so it never blocks on stdout.
            for line in process.stdout:
                output.append(line)
                match = LISTENING.search(line)
                if match and not ready.is_set():
                    found["base_url"], found["port"] = match.group(1), match.group(2)
                    ready.set()
            ready.set()

        threading.Thread(target=pump, name=f"latchkey-serve-{port}", daemon=True).start()
        try:
            if not ready.wait(STARTUP_TIMEOUT) or "base_url" not in found:
                pytest.fail(
                    f"server did not print its listening line within {STARTUP_TIMEOUT:.0f} s:\n" + "".join(output)
                )
            assert int(found["port"]) == port, f"server bound {found['port']}, asked for {port}"
            yield Server(found["base_url"], f"http://127.0.0.1:{emulator_port}", process, output)
        finally:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=10)
