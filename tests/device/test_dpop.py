"""DPoP (RFC 9449) sessions of a real `latchkey serve --dev`, with proofs made by jwcrypto (independent of Latchkey's
code): the binding at sign-in, at refresh and at /v1/me, every refusal the RFC calls for, and the nonce dance of
`dpop.requireNonce`."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
from device_support import (  # noqa: E402
    Server, apple_authorization, claims, me, new_key, post, proof, refresh, refused, rfc7638_thumbprint, serve,
)

MAX_AGE = 60
SETTINGS = {
    "LATCHKEY_ANONYMOUS_ENABLED": "true",
    "LATCHKEY_ANONYMOUS_PER_IP_PER_HOUR": "1000",
    "LATCHKEY_DPOP_MODE": "allow",
    "LATCHKEY_DPOP_MAX_AGE": str(MAX_AGE),
}


@pytest.fixture(scope="module")
def server():
    with serve(SETTINGS, dev=True, prefix="latchkey-dpop-") as served:
        yield served


@pytest.fixture(scope="module")
def nonce_server():
    """dpop.mode require and dpop.requireNonce: every proof carries the server's nonce."""
    settings = {**SETTINGS, "LATCHKEY_DPOP_MODE": "require", "LATCHKEY_DPOP_REQUIRE_NONCE": "true"}
    with serve(settings, dev=True, prefix="latchkey-dpop-nonce-") as served:
        yield served


def bound_guest(server: Server, key=None):
    """A guest signed in with a proof by `key` (a new one unless given): (key, the sign-in answer)."""
    key = key or new_key()
    answer = post(server, "/v1/auth/anonymous", dpop=proof(key, "POST", server.url + "/v1/auth/anonymous"))
    assert answer.status_code == 200, answer.text
    return key, answer.json()


def good_me(server: Server, key, access_token: str):
    return me(server, "DPoP", access_token, proof(key, "GET", server.url + "/v1/me", access_token=access_token))


# MARK: - The binding


def test_discovery_names_es256_for_proofs(server: Server) -> None:
    metadata = requests.get(server.url + "/.well-known/openid-configuration", timeout=30).json()
    assert metadata["issuer"] == server.url
    assert metadata["dpop_signing_alg_values_supported"] == ["ES256"]


def test_a_sign_in_with_a_proof_is_bound_to_its_key(server: Server) -> None:
    key, session = bound_guest(server)
    assert session["tokenType"] == "DPoP"
    jkt = claims(server, session["accessToken"])["cnf"]["jkt"]
    # The server's RFC 7638 thumbprint is jwcrypto's, and the one computed here by hand.
    assert jkt == key.thumbprint() == rfc7638_thumbprint(key)
    assert good_me(server, key, session["accessToken"]).status_code == 200


def test_a_sign_in_without_a_proof_stays_bearer(server: Server) -> None:
    answer = post(server, "/v1/auth/anonymous")
    assert answer.status_code == 200, answer.text
    session = answer.json()
    assert session["tokenType"] == "Bearer"
    assert "cnf" not in claims(server, session["accessToken"])
    assert me(server, "Bearer", session["accessToken"]).status_code == 200
    # An unbound token is a bearer token: not taken as DPoP, even with a proof.
    key = new_key()
    refused(me(server, "DPoP", session["accessToken"], proof(key, "GET", server.url + "/v1/me", access_token=session["accessToken"])),
            401, "invalid_token")


def test_a_provider_sign_in_is_bound_too(server: Server) -> None:
    key = new_key()
    answer = post(server, "/v1/auth/apple", apple_authorization(server), dpop=proof(key, "POST", server.url + "/v1/auth/apple"))
    assert answer.status_code == 200, answer.text
    session = answer.json()
    assert session["tokenType"] == "DPoP"
    token = claims(server, session["accessToken"])
    assert token["cnf"]["jkt"] == key.thumbprint() and token["idp"] == "apple"
    body = good_me(server, key, session["accessToken"]).json()
    assert body["identities"][0]["provider"] == "apple"


def test_refresh_keeps_the_binding_and_me_takes_the_new_token(server: Server) -> None:
    key, session = bound_guest(server)
    subject = claims(server, session["accessToken"])["sub"]
    for _ in range(2):
        answer = refresh(server, session["refreshToken"], proof(key, "POST", server.url + "/v1/token"))
        assert answer.status_code == 200, answer.text
        session = answer.json()
        assert session["tokenType"] == "DPoP"
        token = claims(server, session["accessToken"])
        assert token["cnf"]["jkt"] == key.thumbprint() and token["sub"] == subject
        response = good_me(server, key, session["accessToken"])
        assert response.status_code == 200 and response.json()["id"] == subject, response.text


# MARK: - Refusals at sign-in


def reason(case: str) -> str:
    """What the refusal's description names for each kind of bad proof."""
    for start, word in (("wrong htm", "htm"), ("wrong htu", "htu"), ("stale iat", "iat"), ("iat", "iat"), ("another key", "another key"),
                        ("no ath", "lacks ath"), ("ath of", "ath is not"), ("no proof", "DPoP proof")):
        if case.startswith(start):
            return word
    raise AssertionError(case)


def sign_in_proofs(server: Server, key):
    url = server.url + "/v1/auth/anonymous"
    now = int(time.time())
    return {
        "wrong htm": proof(key, "GET", url),
        "wrong htu (another path)": proof(key, "POST", server.url + "/v1/auth/google"),
        "wrong htu (another port)": proof(key, "POST", f"http://127.0.0.1:{server.served.port + 1}/v1/auth/anonymous"),
        "wrong htu (another host)": proof(key, "POST", url.replace("127.0.0.1", "localhost")),
        "stale iat": proof(key, "POST", url, iat=now - 2 * MAX_AGE),
        "iat in the future": proof(key, "POST", url, iat=now + 2 * MAX_AGE),
    }


@pytest.mark.parametrize("case", ["wrong htm", "wrong htu (another path)", "wrong htu (another port)", "wrong htu (another host)", "stale iat",
                                  "iat in the future"])
def test_a_sign_in_with_a_bad_proof_is_refused(server: Server, case: str) -> None:
    refused(post(server, "/v1/auth/anonymous", dpop=sign_in_proofs(server, new_key())[case]), 400, "invalid_dpop_proof", reason(case))


def test_a_replayed_sign_in_proof_is_refused(server: Server) -> None:
    key = new_key()
    once = proof(key, "POST", server.url + "/v1/auth/anonymous")
    assert post(server, "/v1/auth/anonymous", dpop=once).status_code == 200
    refused(post(server, "/v1/auth/anonymous", dpop=once), 400, "invalid_dpop_proof", "already used")


# MARK: - Refusals at refresh


def refresh_proofs(server: Server, key):
    url = server.url + "/v1/token"
    now = int(time.time())
    return {
        "no proof": None,
        "another key": proof(new_key(), "POST", url),
        "wrong htm": proof(key, "GET", url),
        "wrong htu": proof(key, "POST", server.url + "/oauth2/token"),
        "stale iat": proof(key, "POST", url, iat=now - 2 * MAX_AGE),
    }


@pytest.mark.parametrize("case", ["no proof", "another key", "wrong htm", "wrong htu", "stale iat"])
def test_a_refresh_without_a_good_proof_by_the_key_is_refused_and_the_session_lives_on(server: Server, case: str) -> None:
    key, session = bound_guest(server)
    refused(refresh(server, session["refreshToken"], refresh_proofs(server, key)[case]), 400, "invalid_dpop_proof", reason(case))
    # The refused refresh spent nothing: the refresh token still works, with a proof by the key.
    answer = refresh(server, session["refreshToken"], proof(key, "POST", server.url + "/v1/token"))
    assert answer.status_code == 200, answer.text
    assert claims(server, answer.json()["accessToken"])["cnf"]["jkt"] == key.thumbprint()


def test_a_replayed_refresh_proof_is_refused(server: Server) -> None:
    key, session = bound_guest(server)
    once = proof(key, "POST", server.url + "/v1/token")
    first = refresh(server, session["refreshToken"], once)
    assert first.status_code == 200, first.text
    refused(refresh(server, first.json()["refreshToken"], once), 400, "invalid_dpop_proof", "already used")


# MARK: - Refusals at /v1/me


def test_a_bound_token_sent_as_bearer_is_refused(server: Server) -> None:
    _, session = bound_guest(server)
    response = me(server, "Bearer", session["accessToken"])
    refused(response, 401, "invalid_token")
    assert response.headers["WWW-Authenticate"].startswith("DPoP ") and 'algs="ES256"' in response.headers["WWW-Authenticate"]


def me_proofs(server: Server, key, access_token: str):
    url = server.url + "/v1/me"
    now = int(time.time())
    return {
        "no proof": None,
        "no ath": proof(key, "GET", url, access_token=access_token, with_ath=False),
        "ath of another token": proof(key, "GET", url, access_token=access_token + "x"),
        "another key": proof(new_key(), "GET", url, access_token=access_token),
        "wrong htm": proof(key, "POST", url, access_token=access_token),
        "wrong htu": proof(key, "GET", server.url + "/v1/me/sessions", access_token=access_token),
        "stale iat": proof(key, "GET", url, access_token=access_token, iat=now - 2 * MAX_AGE),
    }


@pytest.mark.parametrize("case", ["no proof", "no ath", "ath of another token", "another key", "wrong htm", "wrong htu", "stale iat"])
def test_me_refuses_a_bound_token_without_a_good_proof_by_its_key(server: Server, case: str) -> None:
    key, session = bound_guest(server)
    response = me(server, "DPoP", session["accessToken"], me_proofs(server, key, session["accessToken"])[case])
    refused(response, 401, "invalid_dpop_proof", reason(case))
    assert response.headers["WWW-Authenticate"].startswith('DPoP error="invalid_dpop_proof"')


def test_a_replayed_me_proof_is_refused(server: Server) -> None:
    key, session = bound_guest(server)
    once = proof(key, "GET", server.url + "/v1/me", access_token=session["accessToken"])
    assert me(server, "DPoP", session["accessToken"], once).status_code == 200
    refused(me(server, "DPoP", session["accessToken"], once), 401, "invalid_dpop_proof", "already used")


# MARK: - dpop.mode require and dpop.requireNonce


def test_require_refuses_a_sign_in_without_a_proof(nonce_server: Server) -> None:
    refused(post(nonce_server, "/v1/auth/anonymous"), 400, "invalid_dpop_proof")


def test_the_nonce_dance(nonce_server: Server) -> None:
    server, key = nonce_server, new_key()
    sign_in = server.url + "/v1/auth/anonymous"
    # 1. A proof without a nonce: 400 use_dpop_nonce, and the nonce to use.
    first = post(server, "/v1/auth/anonymous", dpop=proof(key, "POST", sign_in))
    refused(first, 400, "use_dpop_nonce")
    nonce = first.headers["DPoP-Nonce"]
    assert nonce
    # A nonce the server never gave is no better.
    refused(post(server, "/v1/auth/anonymous", dpop=proof(key, "POST", sign_in, nonce="not-the-servers")), 400, "use_dpop_nonce")
    # 2. Again with the nonce: signed in, bound, and the answer carries the nonce on.
    answer = post(server, "/v1/auth/anonymous", dpop=proof(key, "POST", sign_in, nonce=nonce))
    assert answer.status_code == 200, answer.text
    nonce = answer.headers["DPoP-Nonce"]
    session = answer.json()
    assert session["tokenType"] == "DPoP" and claims(server, session["accessToken"])["cnf"]["jkt"] == key.thumbprint()

    # /v1/me: without the nonce, 401 with the DPoP challenge and the nonce; with it, 200.
    access = session["accessToken"]
    without = me(server, "DPoP", access, proof(key, "GET", server.url + "/v1/me", access_token=access))
    refused(without, 401, "use_dpop_nonce")
    assert 'error="use_dpop_nonce"' in without.headers["WWW-Authenticate"]
    nonce = without.headers["DPoP-Nonce"]
    assert me(server, "DPoP", access, proof(key, "GET", server.url + "/v1/me", access_token=access, nonce=nonce)).status_code == 200

    # Refresh: the same dance at the token endpoint.
    token_url = server.url + "/v1/token"
    without = refresh(server, session["refreshToken"], proof(key, "POST", token_url))
    refused(without, 400, "use_dpop_nonce")
    answer = refresh(server, session["refreshToken"], proof(key, "POST", token_url, nonce=without.headers["DPoP-Nonce"]))
    assert answer.status_code == 200, answer.text
    assert answer.headers["DPoP-Nonce"]
    assert claims(server, answer.json()["accessToken"])["cnf"]["jkt"] == key.thumbprint()
