"""A real `latchkey serve` for the Python suites (tests/connections, tests/webhooks): started in a fresh folder with
its own SQLite file, waited for until it listens, stopped afterwards."""

from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import secrets
import socket
import subprocess
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

DEFAULT_BIN = str(Path(__file__).resolve().parents[2] / ".build" / "debug" / "latchkey")
LISTENING = re.compile(r"Latchkey listening on http://127\.0\.0\.1:(\d+)")


def binary() -> str:
    """The `latchkey` executable: LATCHKEY_BIN, or the debug build."""
    path = os.environ.get("LATCHKEY_BIN", DEFAULT_BIN)
    if not os.access(path, os.X_OK):
        pytest.fail(f"latchkey binary not found: {path} (set LATCHKEY_BIN)")
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Served:
    port: int
    process: subprocess.Popen
    folder: str
    environment: dict[str, str]
    output: list[str] = field(default_factory=list)
    emulator_port: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextmanager
def serve(settings: dict[str, str], dev: bool = False, open_files: int | None = None, prefix: str = "latchkey-"):
    """`latchkey serve` (development mode; with `dev`, `--dev` and its emulator) with `settings` in its environment."""
    port = free_port()
    arguments = [binary(), "serve", "--port", str(port)]
    emulator_port = free_port() if dev else None
    if emulator_port is not None:
        arguments += ["--dev", "--emulator-port", str(emulator_port)]

    def limit_files() -> None:
        if open_files is not None:
            _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, hard))

    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        environment = {key: value for key, value in os.environ.items() if not key.startswith("LATCHKEY_")}
        environment.update({"LATCHKEY_DATABASE_URL": os.path.join(folder, "db.sqlite"), "LATCHKEY_LOG_LEVEL": "warning"})
        environment.update(settings)
        process = subprocess.Popen(
            arguments, cwd=folder, env=environment, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, bufsize=1, preexec_fn=limit_files,
        )
        served = Served(port=port, process=process, folder=folder, environment=environment, emulator_port=emulator_port)
        ready = threading.Event()

        def pump() -> None:
            for line in process.stdout:
                served.output.append(line)
                if LISTENING.search(line):
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        try:
            if not ready.wait(60) or process.poll() is not None:
                pytest.fail("serve did not start:\n" + "".join(served.output))
            yield served
        finally:
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def call(url: str, body: dict | None = None, bearer: str | None = None, method: str = "POST", form: dict | None = None, empty: bool = False) -> tuple[int, dict]:
    """One request; the answer's status and JSON body ({} when it has none). `empty`: a POST with no body at all."""
    headers = {}
    data = None
    if body is not None:
        headers["Content-Type"] = "application/json"
        data = json.dumps(body).encode()
    elif form is not None:
        headers["Content-Type"] = "application/x-www-form-urlencoded"
        data = urllib.parse.urlencode(form).encode()
    elif empty:
        data = b""
    if bearer:
        headers["Authorization"] = f"Bearer {bearer}"
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        text = error.read()
        try:
            return error.code, json.loads(text or b"{}")
        except ValueError:
            return error.code, {"unparsed": text.decode(errors="replace")}


def apple_sign_in(emulator: str, server: str, client_id: str) -> dict:
    """A new user of the emulator at `emulator`, signed in with Apple at `server` (with the code): the sign-in answer."""
    status, user = call(f"{emulator}/emulator/users", {})
    assert status == 201, user
    raw_nonce = secrets.token_urlsafe(24)
    status, authorization = call(
        f"{emulator}/emulator/authorizations", {"sub": user["sub"], "clientId": client_id, "nonce": hashlib.sha256(raw_nonce.encode()).hexdigest()})
    assert status == 201, authorization
    status, answer = call(
        f"{server}/v1/auth/apple",
        {"identityToken": authorization["identityToken"], "rawNonce": raw_nonce, "authorizationCode": authorization["authorizationCode"]})
    assert status == 200, answer
    return answer
