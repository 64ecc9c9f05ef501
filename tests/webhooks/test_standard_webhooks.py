"""Webhook deliveries of a real `latchkey serve --dev`, received on loopback and judged by the Standard Webhooks
reference library (standardwebhooks on PyPI), unmodified: every delivery must verify, and an event whose first
attempt was refused arrives later under the same webhook-id."""

from __future__ import annotations

import base64
import hashlib
import datetime
import json
import secrets
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from standardwebhooks import Webhook

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from latchkey_process import apple_sign_in, binary, serve  # noqa: E402
from latchkey_process import call as post  # noqa: E402

CLIENT_ID = "com.example.app"


class Receiver:
    """An endpoint that refuses the first `refuse` attempts with 503, then verifies each delivery with the reference
    library: 204 when it verifies, 400 when it does not."""

    def __init__(self, secret: str, refuse: int) -> None:
        self.verifier = Webhook(secret)
        self.refuse = refuse
        self.attempts: list[dict] = []
        self.verified: list[dict] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
                headers = {name: value for name, value in self.headers.items()}
                status = receiver.judge(body, headers)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def judge(self, body: str, headers: dict[str, str]) -> int:
        with self.lock:
            self.attempts.append({"id": headers.get("webhook-id"), "body": body})
            if len(self.attempts) <= self.refuse:
                return 503
        try:
            payload = self.verifier.verify(body, headers)
        except Exception as error:  # the reference library's refusal, whatever its type
            with self.lock:
                self.verified.append({"id": headers.get("webhook-id"), "error": repr(error)})
            return 400
        with self.lock:
            self.verified.append({"id": headers["webhook-id"], "type": payload["type"], "data": payload["data"], "payload": payload})
        return 204

    def wait_for(self, predicate, seconds: float, what: str) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with self.lock:
                if predicate(list(self.verified)):
                    return
            time.sleep(0.1)
        pytest.fail(f"waited {seconds} s for {what}; received {self.verified}, attempts {len(self.attempts)}")


@pytest.fixture
def dev_server():
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    receiver = Receiver(secret, refuse=1)
    settings = {
        "LATCHKEY_WEBHOOKS_0_URL": receiver.url, "LATCHKEY_WEBHOOKS_0_SECRET": secret, "LATCHKEY_SESSION_REUSE_GRACE": "0",
        "LATCHKEY_ANONYMOUS_ENABLED": "true",
    }
    try:
        with serve(settings, dev=True, prefix="latchkey-webhooks-") as served:
            yield {
                "server": served.url, "emulator": f"http://127.0.0.1:{served.emulator_port}", "receiver": receiver, "folder": served.folder,
                "environment": served.environment,
            }
    finally:
        receiver.server.shutdown()


def test_every_delivery_verifies_with_the_reference_library(dev_server) -> None:
    server, emulator, receiver = dev_server["server"], dev_server["emulator"], dev_server["receiver"]
    session = apple_sign_in(emulator, server, CLIENT_ID)
    user_id = json.loads(base64.urlsafe_b64decode(session["accessToken"].split(".")[1] + "=="))["sub"]

    # A refresh token replayed after its successor was used: the session is revoked, and the backend hears of it.
    status, first = post(f"{server}/v1/token", form={"grant_type": "refresh_token", "refresh_token": session["refreshToken"]})
    assert status == 200, first
    status, second = post(f"{server}/v1/token", form={"grant_type": "refresh_token", "refresh_token": first["refreshToken"]})
    assert status == 200, second
    status, replay = post(f"{server}/v1/token", form={"grant_type": "refresh_token", "refresh_token": session["refreshToken"]})
    assert status == 400 and replay["error"] == "invalid_grant", replay

    # Jane deletes her account.
    again = apple_sign_in(emulator, server, CLIENT_ID)
    status, deleted = post(f"{server}/v1/me", bearer=again["accessToken"], method="DELETE")
    assert status == 200, deleted

    # The first attempt was refused (503); its event comes again about 5 s later, under the same webhook-id.
    receiver.wait_for(lambda seen: {"user.created", "session.reuse_detected", "user.deleted"} <= {item.get("type") for item in seen}, 60, "the events")
    refused_id = receiver.attempts[0]["id"]
    receiver.wait_for(lambda seen: any(item.get("id") == refused_id for item in seen), 60, "the refused event again")

    with receiver.lock:
        verified = list(receiver.verified)
    assert all("error" not in item for item in verified), verified
    created = [item for item in verified if item["type"] == "user.created" and item["data"]["userId"] == user_id]
    assert len({item["id"] for item in created}) == 1 and created[0]["data"]["provider"] == "apple", created
    reuse = next(item for item in verified if item["type"] == "session.reuse_detected")
    assert reuse["data"]["userId"] == user_id and reuse["data"]["clientId"] == CLIENT_ID and reuse["data"]["ip"] == "127.0.0.1", reuse
    deletion = next(item for item in verified if item["type"] == "user.deleted")
    assert deletion["data"]["reason"] == "user_request", deletion
    for item in verified:
        assert set(item["payload"]) == {"type", "timestamp", "data"}, item
        # Never a token or a code in an event.
        text = json.dumps(item["payload"])
        assert session["refreshToken"] not in text and session["accessToken"] not in text

    # `latchkey webhooks test 0` reaches the same endpoint, signed the same way.
    result = subprocess.run(
        [binary(), "webhooks", "test", "0", "--json"], cwd=dev_server["folder"], env=dev_server["environment"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr + result.stdout
    answer = json.loads(result.stdout)
    assert answer["delivered"] is True and answer["status"] == 204, answer
    receiver.wait_for(lambda seen: any(item.get("type") == "webhook.test" and item["id"] == answer["webhookId"] for item in seen), 10, "webhook.test")


def test_a_tampered_delivery_is_refused_by_the_reference_library() -> None:
    """The receiver above would accept anything if the library did: a changed body or a foreign secret must fail."""
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    receiver = Receiver(secret, refuse=0)
    try:
        body = '{"data":{"userId":"u"},"timestamp":"2026-01-01T00:00:00.000Z","type":"user.created"}'
        headers = {"webhook-id": "msg_1", "webhook-timestamp": str(int(time.time()))}
        headers["webhook-signature"] = Webhook(secret).sign("msg_1", datetime.datetime.now(tz=datetime.timezone.utc), body)
        assert receiver.judge(body, headers) == 204
        assert receiver.judge(body.replace('"u"', '"v"'), headers) == 400
        foreign = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
        headers["webhook-signature"] = Webhook(foreign).sign("msg_1", datetime.datetime.now(tz=datetime.timezone.utc), body)
        assert receiver.judge(body, headers) == 400
    finally:
        receiver.server.shutdown()


def apple_proof(emulator: str, sub: str) -> dict:
    """A fresh native Apple sign-in of the emulator user `sub`: the body of POST /v1/auth/apple."""
    raw_nonce = secrets.token_urlsafe(24)
    status, authorization = post(
        f"{emulator}/emulator/authorizations", {"sub": sub, "clientId": CLIENT_ID, "nonce": hashlib.sha256(raw_nonce.encode()).hexdigest()})
    assert status == 201, authorization
    return {"identityToken": authorization["identityToken"], "rawNonce": raw_nonce}


def test_guest_upgrade_and_merge_verify_with_the_reference_library(dev_server) -> None:
    server, emulator, receiver = dev_server["server"], dev_server["emulator"], dev_server["receiver"]
    # A guest links a new Apple account: upgraded in place.
    status, guest = post(f"{server}/v1/auth/anonymous", {})
    assert status == 200 and guest["user"]["isAnonymous"] is True, guest
    status, made = post(f"{emulator}/emulator/users", {})
    assert status == 201, made
    status, linked = post(f"{server}/v1/me/identities/apple", apple_proof(emulator, made["sub"]), bearer=guest["accessToken"])
    assert status == 200 and linked["id"] == guest["user"]["id"] and "isAnonymous" not in linked, linked

    # Another guest proves an Apple account that already has a user: told mergeable, then merged into it.
    status, owner = post(f"{emulator}/emulator/users", {})
    status, existing = post(f"{server}/v1/auth/apple", apple_proof(emulator, owner["sub"]))
    assert status == 200, existing
    status, second = post(f"{server}/v1/auth/anonymous", {})
    status, refused = post(f"{server}/v1/me/identities/apple", apple_proof(emulator, owner["sub"]), bearer=second["accessToken"])
    assert status == 409 and refused["error"] == "identity_in_use" and refused["mergeable"] is True, refused
    status, merged = post(f"{server}/v1/me/merge/apple", apple_proof(emulator, owner["sub"]), bearer=second["accessToken"])
    assert status == 200 and merged["user"]["id"] == existing["user"]["id"], merged

    receiver.wait_for(lambda seen: {"user.upgraded", "user.merged"} <= {item.get("type") for item in seen}, 60, "user.upgraded and user.merged")
    with receiver.lock:
        verified = list(receiver.verified)
    assert all("error" not in item for item in verified), verified
    upgraded = next(item for item in verified if item["type"] == "user.upgraded")
    assert upgraded["data"] == {"userId": guest["user"]["id"], "provider": "apple"}, upgraded
    merge = next(item for item in verified if item["type"] == "user.merged")
    assert merge["data"] == {"userId": existing["user"]["id"], "fromUserId": second["user"]["id"], "intoUserId": existing["user"]["id"]}, merge
    assert not any(item["type"] == "user.deleted" and item["data"]["userId"] == second["user"]["id"] for item in verified)
