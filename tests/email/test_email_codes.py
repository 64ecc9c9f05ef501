"""E-mail one-time codes of a real `latchkey serve`, sent through aiosmtpd (PyPI), a real SMTP server on loopback,
and read from what it received."""

from __future__ import annotations

import email
import email.policy
import re
import sys
import threading
import time
from pathlib import Path

import pytest
from aiosmtpd.controller import Controller

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from latchkey_process import call, free_port, serve  # noqa: E402

REVIEW_ADDRESS = "app.review@example.com"
REVIEW_CODE = "4815162342"


class Inbox:
    """aiosmtpd's handler: keeps each message it is given, parsed."""

    def __init__(self) -> None:
        self.messages: list[email.message.EmailMessage] = []
        self.lock = threading.Lock()

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's name)
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        with self.lock:
            self.messages.append(message)
        return "250 OK"

    def count(self) -> int:
        with self.lock:
            return len(self.messages)

    def code(self, address: str, seconds: float = 10) -> str:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with self.lock:
                mine = [m for m in self.messages if m["To"] == address]
            if mine:
                match = re.match(r"^(\d{6,10}) is your ", str(mine[-1]["Subject"]))
                assert match, f"the subject does not lead with the code: {mine[-1]['Subject']}"
                return match.group(1)
            time.sleep(0.05)
        pytest.fail(f"no message to {address}")


@pytest.fixture(scope="module")
def smtp():
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    yield controller, inbox
    controller.stop()


@pytest.fixture
def server(smtp):
    controller, inbox = smtp
    settings = {
        "LATCHKEY_EMAIL_SMTP_URL": f"smtp://127.0.0.1:{controller.port}",
        "LATCHKEY_EMAIL_FROM": "sign-in@example.com",
        "LATCHKEY_EMAIL_PRODUCT_NAME": "Example",
        "LATCHKEY_EMAIL_CODE_LIFETIME": "60",
        "LATCHKEY_EMAIL_REVIEW_ACCESS_0_ADDRESS": REVIEW_ADDRESS,
        "LATCHKEY_EMAIL_REVIEW_ACCESS_0_CODE": REVIEW_CODE,
        "LATCHKEY_EMAIL_REVIEW_ACCESS_0_EXPIRES_AT": "2099-01-01T00:00:00Z",
    }
    with serve(settings, prefix="latchkey-email-") as served:
        yield served.url, inbox


def start(url: str, address: str) -> tuple[int, dict]:
    return call(f"{url}/v1/auth/email/start", {"email": address})


def verify(url: str, address: str, code: str) -> tuple[int, dict]:
    return call(f"{url}/v1/auth/email/verify", {"email": address, "code": code})


def test_the_code_received_signs_in(server):
    url, inbox = server
    status, answer = start(url, "ann@example.com")
    assert status == 202 and answer == {"status": "sent"}
    code = inbox.code("ann@example.com")
    message = [m for m in inbox.messages if m["To"] == "ann@example.com"][-1]
    assert message.get_body(("plain",)) is not None and message.get_body(("html",)) is not None
    assert "http" not in message.get_body(("plain",)).get_content()
    status, session = verify(url, "ann@example.com", code)
    assert status == 200, session
    assert session["isNewUser"] is True
    assert session["user"]["identities"][0]["provider"] == "email"
    assert session["user"]["emailVerified"] is True
    status, _ = verify(url, "ann@example.com", code)
    assert status == 400


def test_five_wrong_tries_kill_the_code(server):
    url, inbox = server
    assert start(url, "bob@example.com")[0] == 202
    code = inbox.code("bob@example.com")
    wrong = "000000" if code != "000000" else "111111"
    for _ in range(5):
        status, answer = verify(url, "bob@example.com", wrong)
        assert status == 400 and answer["error"] == "invalid_grant"
    status, answer = verify(url, "bob@example.com", code)
    assert status == 400 and "no live code" in answer["error_description"]


def test_known_and_unknown_addresses_get_the_same_answer(server):
    url, inbox = server
    assert start(url, "known@example.com")[0] == 202
    assert verify(url, "known@example.com", inbox.code("known@example.com"))[0] == 200
    time.sleep(61)
    known = start(url, "known@example.com")
    unknown = start(url, "unknown@example.com")
    assert known == unknown == (202, {"status": "sent"})


def test_one_send_a_minute_to_an_address(server):
    url, inbox = server
    assert start(url, "carol@example.com")[0] == 202
    before = inbox.count()
    status, answer = start(url, "carol@example.com")
    assert status == 429 and answer["error"] == "rate_limited"
    assert inbox.count() == before


def test_an_expired_code_is_refused(server):
    url, inbox = server
    assert start(url, "dave@example.com")[0] == 202
    code = inbox.code("dave@example.com")
    time.sleep(61)
    status, answer = verify(url, "dave@example.com", code)
    assert status == 400 and "no live code" in answer["error_description"]


def test_the_review_address_signs_in_with_its_fixed_code_and_no_mail(server):
    url, inbox = server
    before = inbox.count()
    assert start(url, REVIEW_ADDRESS)[0] == 202
    time.sleep(0.5)
    assert inbox.count() == before
    assert verify(url, REVIEW_ADDRESS, "1234567890")[0] == 400
    status, session = verify(url, REVIEW_ADDRESS, REVIEW_CODE)
    assert status == 200, session


def test_an_unreachable_smtp_server_is_503_never_202():
    settings = {"LATCHKEY_EMAIL_SMTP_URL": f"smtp://127.0.0.1:{free_port()}", "LATCHKEY_EMAIL_FROM": "sign-in@example.com"}
    with serve(settings, prefix="latchkey-email-down-") as served:
        status, answer = call(f"{served.url}/v1/auth/email/start", {"email": "erin@example.com"})
        assert status == 503 and answer["error"] == "temporarily_unavailable"
