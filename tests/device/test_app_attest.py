"""App Attest of a real `latchkey serve --dev`, with the emulator's stand-in of DCAppAttestService making the
attestations and assertions:

- pyattest (PyPI, unmodified) accepts the emulator's attestations and assertions when given the emulator's root, and
  refuses them for another App ID, another challenge, or Apple's real root: the stand-in has Apple's format;
- end to end in `appAttest.mode` require: challenge, attestation over SHA-256(challenge.thumbprint), sign-in with a
  DPoP proof, then assertions; each forgery refused with 401 `invalid_attestation`;
- `report` refuses nothing and counts in /metrics;
- `latchkey attest verify` prints one line per check and names the one that failed."""

from __future__ import annotations

import asyncio
import base64
import subprocess
import sys
from pathlib import Path

import cbor2
import pytest
import requests
from cryptography import x509
from pyattest.assertion import Assertion
from pyattest.attestation import Attestation
from pyattest.configs.apple import AppleConfig
from pyattest.exceptions import InvalidAppIdException, InvalidCertificateChainException, InvalidNonceException, PyAttestException

sys.path.insert(0, str(Path(__file__).resolve().parent))
from device_support import (  # noqa: E402
    CLIENT_ID, Install, Server, apple_authorization, apple_user, claims, client_data, client_data_hash, new_key, proof, refresh, refused, serve,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from latchkey_process import binary  # noqa: E402

# `serve --dev` trusts the emulator's root and, in development, the App IDs of its emulated team. With mode require
# the App IDs are set here too (see README.md: serve --dev refuses to start otherwise); the emulator attests any App ID.
# pyattest builds its ValidationContext with `extra_trust_roots`, which pyhanko-certvalidator 0.33 warns about.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:pyhanko_certvalidator.registry")

REQUIRE_APP_ID = "DEVICE1234." + CLIENT_ID
OTHER_APP_ID = "DEVICE1234.com.example.other"
COMMON = {"LATCHKEY_ANONYMOUS_ENABLED": "true", "LATCHKEY_ANONYMOUS_PER_IP_PER_HOUR": "1000"}


@pytest.fixture(scope="module")
def report_server():
    """serve --dev as it comes: App Attest in report mode for the emulated team's App ID, the emulator's root trusted."""
    with serve(COMMON, dev=True, prefix="latchkey-appattest-report-") as served:
        yield served


@pytest.fixture(scope="module")
def require_server():
    settings = {**COMMON, "LATCHKEY_APP_ATTEST_MODE": "require", "LATCHKEY_APP_ATTEST_APP_IDS": REQUIRE_APP_ID,
                "LATCHKEY_APP_ATTEST_ENVIRONMENT": "development"}
    with serve(settings, dev=True, prefix="latchkey-appattest-require-") as served:
        yield served


def dev_app_id(server: Server) -> str:
    return f"{server.team_id}.{CLIENT_ID}"


def root_pem(server: Server) -> bytes:
    answer = requests.get(server.emulator + "/emulator/appattest/root.pem", timeout=30)
    assert answer.status_code == 200 and answer.content.startswith(b"-----BEGIN CERTIFICATE-----"), answer.text
    return answer.content


def pyattest_verify(made: dict, app_id: str, data: bytes, root: bytes | None) -> Attestation:
    """pyattest's verification of an attestation. pyattest takes the data the app hashed (its `nonce`) and computes
    the client data hash as SHA-256 of it itself: here that data is `challenge.thumbprint`."""
    config = AppleConfig(key_id=base64.b64decode(made["keyId"]), app_id=app_id, production=False, root_ca=root)
    attestation = Attestation(base64.b64decode(made["attestation"]), data, config)
    asyncio.run(attestation.verify())
    return attestation


def attested_claims(server: Server, answer: requests.Response) -> dict:
    assert answer.status_code == 200, answer.text
    return claims(server, answer.json()["accessToken"])


def flipped(encoded: str, at: int) -> str:
    raw = bytearray(base64.b64decode(encoded))
    raw[at] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


# MARK: - pyattest judges the emulator's stand-in


def test_pyattest_accepts_the_emulators_attestation_and_assertions(report_server: Server) -> None:
    install = Install(report_server, dev_app_id(report_server))
    challenge = install.challenge()
    data = client_data(challenge, install.thumbprint)
    made = install.attest(challenge)
    verified = pyattest_verify(made, install.app_id, data, root_pem(report_server))
    assert verified.verified and verified.data["data"]["counter"] == 0
    assert verified.data["data"]["aaguid"] == b"appattestdevelop"

    # The assertions: signed by the attested key (the leaf certificate's), counters 1 and 2.
    leaf = x509.load_der_x509_certificate(cbor2.loads(base64.b64decode(made["attestation"]))["attStmt"]["x5c"][0])
    config = AppleConfig(key_id=base64.b64decode(made["keyId"]), app_id=install.app_id, production=False, root_ca=root_pem(report_server))
    for counter in (1, 2):
        later = install.challenge()
        evidence = install.assertion(later)
        assertion = Assertion(base64.b64decode(evidence["assertion"]), client_data_hash(later, install.thumbprint), leaf.public_key(), config)
        assertion.verify()
        assert assertion.data["counter"] == counter


@pytest.mark.parametrize("forgery", ["another App ID", "another challenge", "another thumbprint", "Apple's root"])
def test_pyattest_refuses_what_does_not_match(report_server: Server, forgery: str) -> None:
    install = Install(report_server, dev_app_id(report_server))
    challenge = install.challenge()
    made = install.attest(challenge)
    app_id, data, root = install.app_id, client_data(challenge, install.thumbprint), root_pem(report_server)
    expected: type[PyAttestException] = InvalidNonceException
    if forgery == "another App ID":
        app_id, expected = OTHER_APP_ID, InvalidAppIdException
    elif forgery == "another challenge":
        data = client_data(install.challenge(), install.thumbprint)
    elif forgery == "another thumbprint":
        data = client_data(challenge, new_key().thumbprint())
    else:
        # pyattest's own copy of Apple App Attestation Root CA: the emulator's chain is not Apple's.
        root, expected = None, InvalidCertificateChainException
    with pytest.raises(expected):
        pyattest_verify(made, app_id, data, root)


# MARK: - End to end, appAttest.mode require


def test_attestation_then_assertion_sign_in_attested_and_bound(require_server: Server) -> None:
    install = Install(require_server, REQUIRE_APP_ID)
    refused(install.sign_in(None), 401, "invalid_attestation")

    # The install's first sign-in, with Apple: an attestation vouching for the DPoP key.
    sub = apple_user(require_server)
    first = install.sign_in(install.attestation(install.challenge()), path="/v1/auth/apple", body=apple_authorization(require_server, sub))
    token = attested_claims(require_server, first)
    assert token["attested"] is True and token["cnf"]["jkt"] == install.thumbprint and token["idp"] == "apple"
    assert first.json()["tokenType"] == "DPoP" and first.json()["isNewUser"] is True
    user = first.json()["user"]["id"]

    # Later sign-ins of the same user: assertions by the same key (counters 1 then 2).
    for _ in range(2):
        later = install.sign_in(install.assertion(install.challenge()), path="/v1/auth/apple", body=apple_authorization(require_server, sub))
        token = attested_claims(require_server, later)
        assert token["attested"] is True and token["cnf"]["jkt"] == install.thumbprint
        assert later.json()["user"]["id"] == user and later.json()["isNewUser"] is False

    # A guest's sign-in attests the same way; the session stays attested and bound across a refresh.
    guest = install.sign_in(install.assertion(install.challenge()))
    assert attested_claims(require_server, guest)["attested"] is True
    refreshed = refresh(require_server, guest.json()["refreshToken"], proof(install.dpop, "POST", require_server.url + "/v1/token"))
    token = attested_claims(require_server, refreshed)
    assert token["attested"] is True and token["cnf"]["jkt"] == install.thumbprint


def test_without_a_dpop_key_the_client_data_hash_is_of_the_challenge_alone(require_server: Server) -> None:
    install = Install(require_server, REQUIRE_APP_ID)
    challenge = install.challenge()
    answer = install.sign_in(install.attestation(challenge, thumbprint=None), with_dpop=False)
    token = attested_claims(require_server, answer)
    assert token["attested"] is True and "cnf" not in token and answer.json()["tokenType"] == "Bearer"


def test_an_attestation_for_another_app_id_is_refused(require_server: Server) -> None:
    install = Install(require_server, REQUIRE_APP_ID)
    refused(install.sign_in(install.attestation(install.challenge(), app_id=OTHER_APP_ID)), 401, "invalid_attestation", "appId")


def test_an_attestation_over_another_challenge_is_refused(require_server: Server) -> None:
    install = Install(require_server, REQUIRE_APP_ID)
    sent, hashed = install.challenge(), install.challenge()
    evidence = install.attestation(hashed)
    evidence["challenge"] = sent
    refused(install.sign_in(evidence), 401, "invalid_attestation", "nonce")


def test_an_attestation_for_another_dpop_key_is_refused(require_server: Server) -> None:
    install = Install(require_server, REQUIRE_APP_ID)
    refused(install.sign_in(install.attestation(install.challenge(), thumbprint=new_key().thumbprint())), 401, "invalid_attestation", "nonce")


@pytest.mark.parametrize("where", ["authenticator data", "leaf certificate"])
def test_a_tampered_attestation_is_refused(require_server: Server, where: str) -> None:
    install = Install(require_server, REQUIRE_APP_ID)
    evidence = install.attestation(install.challenge())
    raw = base64.b64decode(evidence["attestation"])
    decoded = cbor2.loads(raw)
    part = decoded["authData"] if where == "authenticator data" else decoded["attStmt"]["x5c"][0]
    # In the authenticator data, a byte of the aaguid (which the leaf's nonce covers); in the leaf certificate, the last
    # byte of its signature (the DER stays well formed, the intermediate's signature no longer matches).
    at = raw.index(part) + (45 if where == "authenticator data" else len(part) - 1)
    evidence["attestation"] = flipped(evidence["attestation"], at)
    refused(install.sign_in(evidence), 401, "invalid_attestation", "nonce" if where == "authenticator data" else "chain")


def test_a_reused_challenge_is_refused(require_server: Server) -> None:
    install = Install(require_server, REQUIRE_APP_ID)
    challenge = install.challenge()
    assert install.sign_in(install.attestation(challenge)).status_code == 200
    # A new install, a new key attested over the same challenge: the challenge is spent.
    other = Install(require_server, REQUIRE_APP_ID)
    refused(other.sign_in(other.attestation(challenge)), 401, "invalid_attestation", "already used")
    # And the very same sign-in body again.
    refused(install.sign_in(install.assertion(challenge)), 401, "invalid_attestation", "already used")


def test_a_challenge_the_server_never_gave_is_refused(require_server: Server) -> None:
    install = Install(require_server, REQUIRE_APP_ID)
    forged = base64.urlsafe_b64encode(bytes(40)).rstrip(b"=").decode()
    refused(install.sign_in(install.attestation(forged)), 401, "invalid_attestation", "not one of this server's")


def test_an_assertion_whose_counter_does_not_move_is_refused(require_server: Server) -> None:
    install = Install(require_server, REQUIRE_APP_ID)
    assert install.sign_in(install.attestation(install.challenge())).status_code == 200
    # Two assertions made in order (counters 1 and 2), used in the other order.
    first, second = install.assertion(install.challenge()), install.assertion(install.challenge())
    assert attested_claims(require_server, install.sign_in(second))["attested"] is True
    refused(install.sign_in(first), 401, "invalid_attestation", "counter")


def test_an_assertion_for_another_dpop_key_is_refused(require_server: Server) -> None:
    install = Install(require_server, REQUIRE_APP_ID)
    assert install.sign_in(install.attestation(install.challenge())).status_code == 200
    refused(install.sign_in(install.assertion(install.challenge(), thumbprint=new_key().thumbprint())), 401, "invalid_attestation", "signature")


# MARK: - report


def test_report_refuses_nothing_and_counts(report_server: Server) -> None:
    invalid = "latchkey_app_attest_total", 'outcome="invalid"'
    missing = "latchkey_app_attest_total", 'outcome="missing"'
    before_invalid, before_missing = report_server.metric(*invalid), report_server.metric(*missing)
    install = Install(report_server, dev_app_id(report_server))

    without = install.sign_in(None)
    assert "attested" not in attested_claims(report_server, without)
    wrong_app = install.sign_in(install.attestation(install.challenge(), app_id=f"{report_server.team_id}.com.example.other"))
    assert "attested" not in attested_claims(report_server, wrong_app)
    wrong_key = install.sign_in(install.attestation(install.challenge(), thumbprint=new_key().thumbprint()))
    assert "attested" not in attested_claims(report_server, wrong_key)
    # And a good one, for the emulated team's App ID that serve --dev trusts: attested.
    good = install.sign_in(install.attestation(install.challenge()))
    assert attested_claims(report_server, good)["attested"] is True

    assert report_server.metric(*invalid) == before_invalid + 2
    assert report_server.metric(*missing) == before_missing + 1


# MARK: - latchkey attest verify


def attest_verify(server: Server, tmp_path: Path, made: dict, app_id: str, cdh: bytes) -> subprocess.CompletedProcess:
    root = tmp_path / "root.pem"
    root.write_bytes(root_pem(server))
    return subprocess.run(
        [binary(), "attest", "verify", "--app-id", app_id, "--key-id", made["keyId"], "--client-data-hash", base64.b64encode(cdh).decode(),
         "--environment", "development", "--root", str(root)],
        input=made["attestation"] + "\n", capture_output=True, text=True, timeout=60)


CHECKS = ["encoding", "chain", "nonce", "keyId", "appId", "environment", "counter", "credentialId"]


def test_attest_verify_passes_an_emulator_attestation(report_server: Server, tmp_path: Path) -> None:
    install = Install(report_server, dev_app_id(report_server))
    challenge = install.challenge()
    made = install.attest(challenge)
    run = attest_verify(report_server, tmp_path, made, install.app_id, client_data_hash(challenge, install.thumbprint))
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert [line.split()[0] for line in lines[:-1]] == ["ok"] * len(CHECKS), run.stdout
    assert [line.split()[1] for line in lines[:-1]] == CHECKS, run.stdout
    assert lines[-1].startswith("valid"), run.stdout


@pytest.mark.parametrize("wrong", ["appId", "nonce"])
def test_attest_verify_names_the_failed_check(report_server: Server, tmp_path: Path, wrong: str) -> None:
    install = Install(report_server, dev_app_id(report_server))
    challenge = install.challenge()
    made = install.attest(challenge)
    app_id = OTHER_APP_ID if wrong == "appId" else install.app_id
    cdh = client_data_hash(challenge if wrong == "appId" else install.challenge(), install.thumbprint)
    run = attest_verify(report_server, tmp_path, made, app_id, cdh)
    assert run.returncode == 1, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    failed = [line for line in lines if line.startswith("FAIL")]
    assert [line.split()[1].rstrip(":") for line in failed] == [wrong], run.stdout
    assert f"the {wrong} check failed" in lines[-1], run.stdout


# MARK: - serve --dev's own App IDs in require mode


def test_serve_dev_in_require_mode_trusts_the_emulated_teams_app_id() -> None:
    with serve({**COMMON, "LATCHKEY_APP_ATTEST_MODE": "require"}, dev=True, prefix="latchkey-appattest-dev-require-") as server:
        install = Install(server, dev_app_id(server))
        refused(install.sign_in(None), 401, "invalid_attestation")
        assert attested_claims(server, install.sign_in(install.attestation(install.challenge())))["attested"] is True
