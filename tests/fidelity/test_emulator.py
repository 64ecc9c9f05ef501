"""Independent-client fidelity tests for Latchkey's Apple/Google identity-provider emulator.

These tests play a third-party client written against the real appleid.apple.com (and Google's
OAuth endpoints), with only the base URL changed. Nothing here uses Latchkey code: client secrets
are built with PyJWT (ES256, raw r||s signatures), tokens are verified with PyJWT against the JWKS
the emulator publishes, and hashes are computed with hashlib.

The emulator is started once per session as a subprocess on a free loopback port:
    LATCHKEY_BIN=/path/to/latchkey python3 -m pytest -q tests/fidelity

Negative tests come first in each group, so a permissive emulator fails early and loudly.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import secrets
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import jwt
import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

DEFAULT_BIN = "/work/main/.build/debug/latchkey"
STARTUP_TIMEOUT = 30.0
HTTP_TIMEOUT = 15.0

APPLE_ISSUER = "https://appleid.apple.com"
APPLE_AUDIENCE = "https://appleid.apple.com"  # aud of the client secret
NATIVE_CLIENT = "com.example.app"  # bundle id
WEB_CLIENT = "com.example.web"  # Services ID
REDIRECT_URI = "https://app.example.com/callback"
GOOGLE_CLIENT = "emulator-google-client"
GOOGLE_ISSUERS = ("https://accounts.google.com", "accounts.google.com")
MAX_SECRET_LIFETIME = 15_777_000  # seconds; Apple's documented ceiling for a client secret's exp

APPLE_SUB = re.compile(r"^\d{6}\.[0-9a-f]{32}\.\d{4}$")
LISTENING = re.compile(r"Latchkey emulator listening on (http://127\.0\.0\.1:(\d+))")


# --------------------------------------------------------------------------------------------
# Emulator process
# --------------------------------------------------------------------------------------------


@dataclass
class Emulator:
    base_url: str
    team_id: str
    key_id: str
    private_key: ec.EllipticCurvePrivateKey
    process: subprocess.Popen
    output: list = field(default_factory=list)
    session: requests.Session = field(default_factory=requests.Session)

    def url(self, path: str) -> str:
        return self.base_url + path

    def get(self, path: str, **kwargs) -> requests.Response:
        return self.session.get(self.url(path), timeout=HTTP_TIMEOUT, allow_redirects=False, **kwargs)

    def post(self, path: str, **kwargs) -> requests.Response:
        return self.session.post(self.url(path), timeout=HTTP_TIMEOUT, allow_redirects=False, **kwargs)

    def delete(self, path: str, **kwargs) -> requests.Response:
        return self.session.delete(self.url(path), timeout=HTTP_TIMEOUT, allow_redirects=False, **kwargs)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def running_emulator(team_dir: Path, extra_env: dict | None = None):
    """Starts `latchkey emulate --generate team_dir` on a free loopback port; stops it on exit."""
    binary = os.environ.get("LATCHKEY_BIN", DEFAULT_BIN)
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        pytest.fail(f"latchkey binary not found or not executable: {binary} (set LATCHKEY_BIN)")

    port = _free_port()
    process = subprocess.Popen(
        [binary, "emulate", "--generate", str(team_dir), "--port", str(port)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        env={**os.environ, **(extra_env or {})},
    )
    output: list[str] = []
    found: dict[str, str] = {}
    ready = threading.Event()

    def pump() -> None:
        # Keeps draining the pipe for the emulator's whole life so it never blocks on stdout.
        for line in process.stdout:
            output.append(line)
            match = LISTENING.search(line)
            if match and not ready.is_set():
                found["base_url"] = match.group(1)
                found["port"] = match.group(2)
                ready.set()
        ready.set()

    threading.Thread(target=pump, name=f"latchkey-emulator-{port}", daemon=True).start()

    def stop() -> None:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)

    session = requests.Session()
    session.trust_env = False  # loopback only: never route through a proxy from the environment
    try:
        if not ready.wait(STARTUP_TIMEOUT) or "base_url" not in found:
            pytest.fail(
                f"emulator did not print its listening line within {STARTUP_TIMEOUT:.0f} s:\n" + "".join(output)
            )
        assert int(found["port"]) == port, f"emulator bound {found['port']}, asked for {port}"

        team = json.loads((Path(team_dir) / "team.json").read_text())
        private_key = serialization.load_pem_private_key(Path(team["keyFile"]).read_bytes(), password=None)
        assert isinstance(private_key, ec.EllipticCurvePrivateKey)
        assert isinstance(private_key.curve, ec.SECP256R1)

        yield Emulator(
            base_url=found["base_url"],
            team_id=team["teamID"],
            key_id=team["keyID"],
            private_key=private_key,
            process=process,
            output=output,
            session=session,
        )
    finally:
        session.close()
        stop()


@pytest.fixture(scope="session")
def emulator(tmp_path_factory) -> Emulator:
    with running_emulator(tmp_path_factory.mktemp("latchkey-team")) as emu:
        yield emu
        assert emu.process.poll() is None, "the emulator died during the session:\n" + "".join(emu.output[-60:])


@pytest.fixture
def clock_reset(emulator):
    """Puts the emulator's clock back to real time after a test that moves it."""
    yield
    response = emulator.post("/emulator/clock", json={"offsetSeconds": 0})
    assert response.status_code == 200, response.text


# --------------------------------------------------------------------------------------------
# Client-side helpers (what a third-party Sign in with Apple library does)
# --------------------------------------------------------------------------------------------


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def half_hash(value: str) -> str:
    """OIDC c_hash / at_hash for RS256: left half of SHA-256, base64url without padding."""
    return b64url(hashlib.sha256(value.encode("ascii")).digest()[:16])


def client_secret(
    emu: Emulator,
    client_id: str,
    *,
    kid: str | None = None,
    iss: str | None = None,
    sub: str | None = None,
    aud: str = APPLE_AUDIENCE,
    iat: int | None = None,
    exp: int | None = None,
    key: ec.EllipticCurvePrivateKey | None = None,
    omit: tuple[str, ...] = (),
) -> str:
    """Apple's client secret, built the way Apple documents it, with PyJWT."""
    now = int(time.time())
    claims = {
        "iss": iss if iss is not None else emu.team_id,
        "iat": iat if iat is not None else now,
        "exp": exp if exp is not None else now + 3600,
        "aud": aud,
        "sub": sub if sub is not None else client_id,
    }
    for name in omit:
        claims.pop(name)
    return jwt.encode(
        claims,
        key if key is not None else emu.private_key,
        algorithm="ES256",
        headers={"kid": kid if kid is not None else emu.key_id},
    )


def der_signature_variant(token: str) -> str:
    """The same JWS with its raw r||s signature re-encoded as ASN.1 DER (what naive code emits)."""
    header, payload, signature = token.split(".")
    raw = b64url_decode(signature)
    assert len(raw) == 64, "PyJWT should emit a raw 64-byte ES256 signature"
    r = int.from_bytes(raw[:32], "big")
    s = int.from_bytes(raw[32:], "big")
    return f"{header}.{payload}.{b64url(encode_dss_signature(r, s))}"


def fetch_jwks(emu: Emulator, path: str) -> dict:
    response = emu.get(path)
    assert response.status_code == 200, response.text
    return response.json()


def verify_token(emu: Emulator, token: str, *, jwks_path: str, audience: str, issuer) -> dict:
    """Verifies an RS256 ID token against the provider's published JWKS, with PyJWT only."""
    header = jwt.get_unverified_header(token)
    assert header.get("alg") == "RS256", header
    assert header.get("kid"), header
    keys = jwt.PyJWKSet.from_dict(fetch_jwks(emu, jwks_path))
    signing_key = keys[header["kid"]]
    claims = jwt.decode(
        token,
        signing_key.key,
        algorithms=["RS256"],
        audience=audience,
        issuer=issuer,
        leeway=5,
        options={"require": ["iss", "aud", "exp", "iat", "sub"]},
    )
    # Belt and braces: an exact issuer match, independent of the library's own check.
    assert claims["iss"] == issuer if isinstance(issuer, str) else claims["iss"] in issuer, claims["iss"]
    return claims


def verify_apple_token(emu: Emulator, token: str, audience: str) -> dict:
    return verify_token(emu, token, jwks_path="/auth/keys", audience=audience, issuer=APPLE_ISSUER)


def verify_google_token(emu: Emulator, token: str) -> dict:
    return verify_token(
        emu, token, jwks_path="/google/oauth2/v3/certs", audience=GOOGLE_CLIENT, issuer=list(GOOGLE_ISSUERS)
    )


def token_request(emu: Emulator, **form) -> requests.Response:
    return emu.post("/auth/token", data=form)


def redeem_code(emu: Emulator, code: str, client_id: str = NATIVE_CLIENT, **extra) -> requests.Response:
    return token_request(
        emu,
        client_id=client_id,
        client_secret=client_secret(emu, client_id),
        grant_type="authorization_code",
        code=code,
        **extra,
    )


def refresh(emu: Emulator, refresh_token: str, client_id: str = NATIVE_CLIENT) -> requests.Response:
    return token_request(
        emu,
        client_id=client_id,
        client_secret=client_secret(emu, client_id),
        grant_type="refresh_token",
        refresh_token=refresh_token,
    )


def revoke(emu: Emulator, token: str, hint: str = "refresh_token", client_id: str = NATIVE_CLIENT) -> requests.Response:
    return emu.post(
        "/auth/revoke",
        data={
            "client_id": client_id,
            "client_secret": client_secret(emu, client_id),
            "token": token,
            "token_type_hint": hint,
        },
    )


def migration_token_request(emu: Emulator, secret: str, client_id: str = NATIVE_CLIENT) -> requests.Response:
    """client_credentials (scope user.migration): authenticates the client and touches no user state."""
    return token_request(
        emu, client_id=client_id, client_secret=secret, grant_type="client_credentials", scope="user.migration"
    )


def assert_apple_error(response: requests.Response, code: str) -> None:
    assert response.status_code == 400, f"expected 400 {code}, got {response.status_code}: {response.text}"
    assert "no-store" in response.headers.get("Cache-Control", ""), response.headers
    assert response.headers.get("Content-Type", "").startswith("application/json"), response.headers
    assert response.json() == {"error": code}, response.text


def create_user(emu: Emulator, **body) -> dict:
    body.setdefault("email", f"user-{uuid.uuid4().hex[:12]}@example.com")
    response = emu.post("/emulator/users", json=body)
    assert response.status_code == 201, response.text
    user = response.json()
    assert APPLE_SUB.match(user["sub"]), user
    return user


def authorize(emu: Emulator, sub: str, client_id: str = NATIVE_CLIENT, **extra) -> dict:
    response = emu.post("/emulator/authorizations", json={"sub": sub, "clientId": client_id, **extra})
    assert response.status_code == 201, response.text
    return response.json()


def native_refresh_token(emu: Emulator, sub: str) -> str:
    answer = authorize(emu, sub)
    response = redeem_code(emu, answer["authorizationCode"])
    assert response.status_code == 200, response.text
    return response.json()["refresh_token"]


def web_code(emu: Emulator, email: str, state: str = "st-123") -> str:
    """A web sign-in through Apple's authorization page (POST = the user pressed Continue)."""
    response = emu.post(
        "/auth/authorize",
        data={
            "client_id": WEB_CLIENT,
            "redirect_uri": REDIRECT_URI,
            "response_type": "code",
            "response_mode": "query",
            "state": state,
            "email": email,
            "action": "continue",
        },
    )
    assert response.status_code in (302, 303), f"{response.status_code}: {response.text}"
    location = urlsplit(response.headers["Location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == REDIRECT_URI
    query = parse_qs(location.query)
    assert query["state"] == [state]
    return query["code"][0]


def request_log(emu: Emulator) -> list:
    response = emu.get("/emulator/requests")
    assert response.status_code == 200, response.text
    return response.json()


# --------------------------------------------------------------------------------------------
# Discovery and keys
# --------------------------------------------------------------------------------------------


def test_apple_discovery_document(emulator):
    response = emulator.get("/.well-known/openid-configuration")
    assert response.status_code == 200
    doc = response.json()
    assert doc["issuer"] == APPLE_ISSUER
    for name, path in [
        ("authorization_endpoint", "/auth/authorize"),
        ("token_endpoint", "/auth/token"),
        ("revocation_endpoint", "/auth/revoke"),
        ("jwks_uri", "/auth/keys"),
    ]:
        assert urlsplit(doc[name]).path == path, (name, doc[name])
        assert doc[name].startswith("http://"), (name, doc[name])
    assert doc["response_types_supported"] == ["code"]
    assert set(doc["response_modes_supported"]) >= {"query", "fragment", "form_post"}
    assert doc["subject_types_supported"] == ["pairwise"]
    assert doc["id_token_signing_alg_values_supported"] == ["RS256"]
    assert set(doc["scopes_supported"]) >= {"openid", "email", "name"}
    assert doc["token_endpoint_auth_methods_supported"] == ["client_secret_post"]
    assert set(doc["claims_supported"]) >= {
        "aud", "email", "email_verified", "exp", "iat", "is_private_email", "iss", "nonce", "nonce_supported",
        "real_user_status", "sub",
    }


def test_apple_jwks_shape(emulator):
    jwks = fetch_jwks(emulator, "/auth/keys")
    assert jwks["keys"], jwks
    for key in jwks["keys"]:
        for member in ("kty", "kid", "use", "alg", "n", "e"):
            assert isinstance(key.get(member), str) and key[member], (member, key)
        assert key["kty"] == "RSA"
        assert key["use"] == "sig"
        assert key["alg"] == "RS256"
        assert "d" not in key and "p" not in key, "private material must not be published"
        assert len(b64url_decode(key["n"])) >= 256, "expect at least a 2048-bit modulus"
    # Every key must load as an RSA public key in a third-party library.
    parsed = jwt.PyJWKSet.from_dict(jwks)
    assert len(parsed.keys) == len(jwks["keys"])


def test_google_discovery_and_certs(emulator):
    doc = emulator.get("/google/.well-known/openid-configuration").json()
    assert doc["issuer"] in GOOGLE_ISSUERS
    assert urlsplit(doc["token_endpoint"]).path == "/google/token"
    assert urlsplit(doc["jwks_uri"]).path == "/google/oauth2/v3/certs"
    assert urlsplit(doc["authorization_endpoint"]).path == "/google/o/oauth2/v2/auth"
    assert "S256" in doc["code_challenge_methods_supported"]
    assert "RS256" in doc["id_token_signing_alg_values_supported"]
    certs = fetch_jwks(emulator, "/google/oauth2/v3/certs")
    for key in certs["keys"]:
        for member in ("kty", "kid", "use", "alg", "n", "e"):
            assert key.get(member), (member, key)
        assert key["kty"] == "RSA" and key["alg"] == "RS256"


# --------------------------------------------------------------------------------------------
# /auth/token: client authentication (negative first)
# --------------------------------------------------------------------------------------------


def test_client_secret_with_unknown_kid_is_invalid_client(emulator):
    assert_apple_error(migration_token_request(emulator, client_secret(emulator, NATIVE_CLIENT, kid="WRONGKEY99")), "invalid_client")


def test_client_secret_with_wrong_iss_is_invalid_client(emulator):
    wrong_team = "ZZZZZZZZZZ" if emulator.team_id != "ZZZZZZZZZZ" else "YYYYYYYYYY"
    assert_apple_error(migration_token_request(emulator, client_secret(emulator, NATIVE_CLIENT, iss=wrong_team)), "invalid_client")


def test_client_secret_with_sub_not_client_id_is_invalid_client(emulator):
    secret = client_secret(emulator, NATIVE_CLIENT, sub=WEB_CLIENT)
    assert_apple_error(migration_token_request(emulator, secret, client_id=NATIVE_CLIENT), "invalid_client")


def test_client_secret_with_wrong_aud_is_invalid_client(emulator):
    secret = client_secret(emulator, NATIVE_CLIENT, aud="https://appleid.apple.com/auth/token")
    assert_apple_error(migration_token_request(emulator, secret), "invalid_client")


def test_expired_client_secret_is_invalid_client(emulator):
    now = int(time.time())
    secret = client_secret(emulator, NATIVE_CLIENT, iat=now - 7200, exp=now - 3600)
    assert_apple_error(migration_token_request(emulator, secret), "invalid_client")


def test_client_secret_exp_too_far_ahead_is_invalid_client(emulator):
    now = int(time.time())
    secret = client_secret(emulator, NATIVE_CLIENT, iat=now, exp=now + MAX_SECRET_LIFETIME + 3600)
    assert_apple_error(migration_token_request(emulator, secret), "invalid_client")


def test_client_secret_with_der_signature_is_invalid_client(emulator):
    raw = client_secret(emulator, NATIVE_CLIENT)
    der = der_signature_variant(raw)
    # Same claims, same key, mathematically valid signature: only the encoding differs.
    assert_apple_error(migration_token_request(emulator, der), "invalid_client")
    assert migration_token_request(emulator, raw).status_code == 200


def test_client_secret_signed_by_another_key_is_invalid_client(emulator):
    stranger = ec.generate_private_key(ec.SECP256R1())
    assert_apple_error(migration_token_request(emulator, client_secret(emulator, NATIVE_CLIENT, key=stranger)), "invalid_client")


def test_client_secret_not_es256_is_invalid_client(emulator):
    now = int(time.time())
    claims = {"iss": emulator.team_id, "iat": now, "exp": now + 3600, "aud": APPLE_AUDIENCE, "sub": NATIVE_CLIENT}
    secret = jwt.encode(claims, secrets.token_bytes(32), algorithm="HS256", headers={"kid": emulator.key_id})
    assert_apple_error(migration_token_request(emulator, secret), "invalid_client")


def test_client_secret_without_iat_is_invalid_client(emulator):
    assert_apple_error(migration_token_request(emulator, client_secret(emulator, NATIVE_CLIENT, omit=("iat",))), "invalid_client")


def test_unregistered_client_id_is_invalid_client(emulator):
    client = "com.example.unregistered"
    assert_apple_error(migration_token_request(emulator, client_secret(emulator, client), client_id=client), "invalid_client")


def test_client_secret_checked_before_the_code(emulator):
    now = int(time.time())
    response = token_request(
        emulator,
        client_id=NATIVE_CLIENT,
        client_secret=client_secret(emulator, NATIVE_CLIENT, iat=now - 7200, exp=now - 3600),
        grant_type="authorization_code",
        code="c0123456789abcdef0123456789abcdef.0.abcd.AAAAAAAAAAAAAAAAAAAAAA",
    )
    assert_apple_error(response, "invalid_client")


def test_missing_client_secret_is_invalid_request(emulator):
    response = token_request(emulator, client_id=NATIVE_CLIENT, grant_type="client_credentials", scope="user.migration")
    assert_apple_error(response, "invalid_request")


def test_unsupported_grant_type(emulator):
    response = token_request(
        emulator,
        client_id=NATIVE_CLIENT,
        client_secret=client_secret(emulator, NATIVE_CLIENT),
        grant_type="password",
        username="alice",
        password="secret",
    )
    assert_apple_error(response, "unsupported_grant_type")


def test_unknown_code_is_invalid_grant(emulator):
    assert_apple_error(redeem_code(emulator, "c" + "0" * 32 + ".0.abcd.AAAAAAAAAAAAAAAAAAAAAA"), "invalid_grant")


def test_unknown_refresh_token_is_invalid_grant(emulator):
    assert_apple_error(refresh(emulator, "r" + "0" * 32 + ".0.abcd.AAAAAAAAAAAAAAAAAAAAAA"), "invalid_grant")


def test_client_secret_expiry_follows_the_emulator_clock(emulator, clock_reset):
    secret = client_secret(emulator, NATIVE_CLIENT)  # exp = now + 3600
    assert migration_token_request(emulator, secret).status_code == 200
    moved = emulator.post("/emulator/clock", json={"offsetSeconds": 7200})
    assert moved.status_code == 200, moved.text
    assert_apple_error(migration_token_request(emulator, secret), "invalid_client")


def test_client_secret_at_maximum_lifetime_is_accepted(emulator):
    now = int(time.time())
    secret = client_secret(emulator, NATIVE_CLIENT, iat=now, exp=now + MAX_SECRET_LIFETIME - 120)
    response = migration_token_request(emulator, secret)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["token_type"] == "Bearer"
    assert body["access_token"]
    assert isinstance(body["expires_in"], int)


# --------------------------------------------------------------------------------------------
# Authorization codes and refresh tokens (negative first)
# --------------------------------------------------------------------------------------------


def test_code_reuse_is_invalid_grant(emulator):
    user = create_user(emulator)
    code = authorize(emulator, user["sub"])["authorizationCode"]
    first = redeem_code(emulator, code)
    assert first.status_code == 200, first.text
    assert_apple_error(redeem_code(emulator, code), "invalid_grant")


def test_native_code_redeemed_by_services_id_is_invalid_grant(emulator):
    user = create_user(emulator)
    code = authorize(emulator, user["sub"], client_id=NATIVE_CLIENT)["authorizationCode"]
    response = redeem_code(emulator, code, client_id=WEB_CLIENT, redirect_uri=REDIRECT_URI)
    assert_apple_error(response, "invalid_grant")
    response = redeem_code(emulator, code, client_id=WEB_CLIENT)
    assert_apple_error(response, "invalid_grant")


def test_web_code_needs_its_redirect_uri(emulator):
    code = web_code(emulator, f"web-{uuid.uuid4().hex[:10]}@example.com")
    assert_apple_error(redeem_code(emulator, code, client_id=WEB_CLIENT), "invalid_grant")
    code = web_code(emulator, f"web-{uuid.uuid4().hex[:10]}@example.com")
    assert_apple_error(
        redeem_code(emulator, code, client_id=WEB_CLIENT, redirect_uri="https://app.example.com/other"), "invalid_grant"
    )


def test_expired_code_is_invalid_grant(emulator, clock_reset):
    user = create_user(emulator)
    code = authorize(emulator, user["sub"])["authorizationCode"]
    # Apple's authorization codes are good for five minutes.
    moved = emulator.post("/emulator/clock", json={"offsetSeconds": 301})
    assert moved.status_code == 200, moved.text
    assert_apple_error(redeem_code(emulator, code), "invalid_grant")


def test_refresh_token_of_another_client_is_invalid_grant(emulator):
    user = create_user(emulator)
    token = native_refresh_token(emulator, user["sub"])
    assert_apple_error(refresh(emulator, token, client_id=WEB_CLIENT), "invalid_grant")
    assert refresh(emulator, token).status_code == 200


def test_consent_revocation_kills_refresh_tokens(emulator):
    user = create_user(emulator)
    token = native_refresh_token(emulator, user["sub"])
    response = emulator.post(f"/emulator/users/{user['sub']}/consent-revocation")
    assert response.status_code == 204, response.text
    assert_apple_error(refresh(emulator, token), "invalid_grant")
    # The next sign-in is a first one again: name and e-mail are shared anew.
    again = authorize(emulator, user["sub"], scopes=["name", "email"])
    assert "user" in again, again


def test_deleted_user_refresh_is_invalid_grant(emulator):
    user = create_user(emulator)
    token = native_refresh_token(emulator, user["sub"])
    pending_code = authorize(emulator, user["sub"])["authorizationCode"]
    response = emulator.delete(f"/emulator/users/{user['sub']}")
    assert response.status_code == 204, response.text
    assert_apple_error(refresh(emulator, token), "invalid_grant")
    assert_apple_error(redeem_code(emulator, pending_code), "invalid_grant")


def test_revoking_unknown_token_is_200_empty(emulator):
    response = revoke(emulator, "r" + secrets.token_hex(16) + ".0.abcd.AAAAAAAAAAAAAAAAAAAAAA")
    assert response.status_code == 200, response.text
    assert response.content == b""


def test_revoke_requires_client_authentication(emulator):
    response = emulator.post(
        "/auth/revoke",
        data={
            "client_id": NATIVE_CLIENT,
            "client_secret": client_secret(emulator, NATIVE_CLIENT, kid="WRONGKEY99"),
            "token": "whatever",
            "token_type_hint": "refresh_token",
        },
    )
    assert_apple_error(response, "invalid_client")


# --------------------------------------------------------------------------------------------
# Native sign-in, end to end
# --------------------------------------------------------------------------------------------


def test_native_flow_end_to_end(emulator):
    user = create_user(emulator, email="alice.fidelity@example.com", givenName="Alice", familyName="Appleseed", realUserStatus=2)
    assert user["email"] == "alice.fidelity@example.com"
    nonce = "n-0S6_WzA2Mj+/= " + secrets.token_urlsafe(8)  # copied verbatim, whatever it contains
    answer = authorize(emulator, user["sub"], nonce=nonce, scopes=["name", "email"])
    code = answer["authorizationCode"]

    # First authorization of the team: the app receives the user's name and e-mail once.
    assert answer["user"]["email"] == user["email"], answer
    assert answer["user"]["name"] == {"firstName": "Alice", "lastName": "Appleseed"}, answer

    # The identity token the iPhone hands the app.
    identity = verify_apple_token(emulator, answer["identityToken"], NATIVE_CLIENT)
    assert identity["iss"] == APPLE_ISSUER
    assert identity["aud"] == NATIVE_CLIENT
    assert identity["sub"] == user["sub"]
    assert APPLE_SUB.match(identity["sub"])
    assert identity["email"] == user["email"]
    assert identity["email_verified"] == "true"
    assert identity["is_private_email"] == "false"
    assert identity["nonce"] == nonce
    assert "nonce_supported" in identity
    assert identity["c_hash"] == half_hash(code)
    assert identity["real_user_status"] == 2
    assert isinstance(identity["iat"], int) and isinstance(identity["exp"], int)
    assert identity["exp"] > identity["iat"]

    # Exchange the code as a native app does: no redirect_uri.
    response = redeem_code(emulator, code)
    assert response.status_code == 200, response.text
    assert "no-store" in response.headers.get("Cache-Control", "")
    tokens = response.json()
    assert tokens["token_type"] == "Bearer"
    assert isinstance(tokens["expires_in"], int) and tokens["expires_in"] > 0
    assert tokens["access_token"] and tokens["refresh_token"]
    claims = verify_apple_token(emulator, tokens["id_token"], NATIVE_CLIENT)
    assert claims["sub"] == user["sub"]
    assert claims["at_hash"] == half_hash(tokens["access_token"])
    assert claims["email"] == user["email"]
    assert claims["email_verified"] == "true"
    if "nonce" in claims:
        assert claims["nonce"] == nonce

    # Refresh: Apple never rotates refresh tokens and always returns an ID token.
    response = refresh(emulator, tokens["refresh_token"])
    assert response.status_code == 200, response.text
    refreshed = response.json()
    assert "refresh_token" not in refreshed, refreshed
    assert refreshed["token_type"] == "Bearer"
    assert refreshed["access_token"] and refreshed["access_token"] != tokens["access_token"]
    claims = verify_apple_token(emulator, refreshed["id_token"], NATIVE_CLIENT)
    assert claims["sub"] == user["sub"]
    assert claims["at_hash"] == half_hash(refreshed["access_token"])
    assert "real_user_status" not in claims, "real_user_status belongs to native sign-ins only"

    # Revoke, then the refresh token is dead.
    response = revoke(emulator, tokens["refresh_token"], hint="refresh_token")
    assert response.status_code == 200, response.text
    assert response.content == b""
    assert_apple_error(refresh(emulator, tokens["refresh_token"]), "invalid_grant")


def test_user_is_shared_only_on_first_authorization(emulator):
    user = create_user(emulator, givenName="Bob", familyName="Builder")
    first = authorize(emulator, user["sub"], scopes=["name", "email"])
    assert "user" in first
    second = authorize(emulator, user["sub"], scopes=["name", "email"])
    assert "user" not in second, second
    # Same team, other client id: still not a first authorization.
    other = authorize(emulator, user["sub"], client_id=WEB_CLIENT, scopes=["name", "email"])
    assert "user" not in other, other


def test_hide_my_email_user(emulator):
    user = create_user(emulator, hideMyEmail=True)
    answer = authorize(emulator, user["sub"], scopes=["email"])
    claims = verify_apple_token(emulator, answer["identityToken"], NATIVE_CLIENT)
    assert claims["email"].endswith("@privaterelay.appleid.com"), claims
    assert claims["email"] == user["email"]
    assert claims["is_private_email"] == "true"
    assert claims["email_verified"] == "true"


def test_authorization_without_nonce_has_no_nonce_claim(emulator):
    user = create_user(emulator)
    claims = verify_apple_token(emulator, authorize(emulator, user["sub"])["identityToken"], NATIVE_CLIENT)
    assert "nonce" not in claims


def test_web_flow_redeems_with_redirect_uri(emulator):
    email = f"web-{uuid.uuid4().hex[:10]}@example.com"
    code = web_code(emulator, email)
    response = redeem_code(emulator, code, client_id=WEB_CLIENT, redirect_uri=REDIRECT_URI)
    assert response.status_code == 200, response.text
    tokens = response.json()
    claims = verify_apple_token(emulator, tokens["id_token"], WEB_CLIENT)
    assert APPLE_SUB.match(claims["sub"])
    assert claims["at_hash"] == half_hash(tokens["access_token"])
    assert "real_user_status" not in claims, "real_user_status belongs to native sign-ins only"
    with pytest.raises(jwt.InvalidAudienceError):
        verify_apple_token(emulator, tokens["id_token"], NATIVE_CLIENT)


def test_revoke_by_access_token(emulator):
    user = create_user(emulator)
    response = redeem_code(emulator, authorize(emulator, user["sub"])["authorizationCode"])
    tokens = response.json()
    response = revoke(emulator, tokens["access_token"], hint="access_token")
    assert response.status_code == 200 and response.content == b"", response.text
    assert_apple_error(refresh(emulator, tokens["refresh_token"]), "invalid_grant")


# --------------------------------------------------------------------------------------------
# Error shape and request log
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "form, code",
    [
        ({"client_id": NATIVE_CLIENT, "grant_type": "refresh_token", "refresh_token": "x"}, "invalid_request"),
        ({"client_id": NATIVE_CLIENT, "client_secret": "not-a-jwt", "grant_type": "refresh_token", "refresh_token": "x"}, "invalid_client"),
    ],
)
def test_error_responses_are_minimal_and_not_cached(emulator, form, code):
    response = token_request(emulator, **form)
    assert response.status_code == 400
    assert response.headers.get("Cache-Control") == "no-store"
    assert list(response.json().keys()) == ["error"]
    assert response.json()["error"] == code


def test_request_log_records_grant_types_and_errors(emulator):
    start = len(request_log(emulator))
    user = create_user(emulator)
    tokens = redeem_code(emulator, authorize(emulator, user["sub"])["authorizationCode"]).json()
    assert refresh(emulator, tokens["refresh_token"]).status_code == 200
    assert_apple_error(migration_token_request(emulator, client_secret(emulator, NATIVE_CLIENT, kid="WRONGKEY99")), "invalid_client")
    assert_apple_error(redeem_code(emulator, "c" + "f" * 32 + ".0.abcd.AAAAAAAAAAAAAAAAAAAAAA"), "invalid_grant")

    entries = [e for e in request_log(emulator)[start:] if e.get("endpoint") == "/auth/token"]
    for entry in entries:
        for member in ("time", "method", "endpoint", "status"):
            assert member in entry, entry
    assert [(e["grantType"], e["status"], e.get("error")) for e in entries] == [
        ("authorization_code", 200, None),
        ("refresh_token", 200, None),
        ("client_credentials", 400, "invalid_client"),
        ("authorization_code", 400, "invalid_grant"),
    ], entries
    assert all(e["clientId"] == NATIVE_CLIENT and e["method"] == "POST" for e in entries), entries
    assert all(e.get("detail") for e in entries if e.get("error")), "errors should say why in the log"


def test_request_log_time_is_unix_or_iso8601(emulator):
    now = emulator.post("/emulator/clock", json={"offsetSeconds": 0}).json()["now"]
    assert_apple_error(token_request(emulator, client_id=NATIVE_CLIENT, grant_type="refresh_token"), "invalid_request")
    logged = request_log(emulator)[-1]["time"]
    if isinstance(logged, str):
        from datetime import datetime

        logged = datetime.fromisoformat(logged.replace("Z", "+00:00")).timestamp()
    assert abs(logged - now) < 300, f"log time {logged} is not near the emulator clock {now} (Unix seconds)"


# --------------------------------------------------------------------------------------------
# Robustness: malformed bodies must get Apple's 400, not kill the emulator
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, content_type",
    [
        (json.dumps({"client_id": NATIVE_CLIENT, "grant_type": "authorization_code"}).encode(), "application/json"),
        ("client_id=com.example.app&grant_type=refresh_token&refresh_token=Jos\u00e9".encode(), "application/x-www-form-urlencoded"),
    ],
    ids=["json-body", "raw-utf8-form"],
)
def test_malformed_token_body_is_invalid_request_not_a_crash(tmp_path, body, content_type):
    # A private emulator: if it crashes, the session's emulator is unaffected.
    with running_emulator(tmp_path / "team", extra_env={"SWIFT_BACKTRACE": "enable=no"}) as emu:
        response = emu.session.post(
            emu.url("/auth/token"), data=body, headers={"Content-Type": content_type}, timeout=20
        )
        assert_apple_error(response, "invalid_request")
        assert emu.get("/auth/keys").status_code == 200
        assert emu.process.poll() is None, "the emulator process died"


# --------------------------------------------------------------------------------------------
# Key rotation
# --------------------------------------------------------------------------------------------


def test_key_rotation_keeps_old_kid_published(emulator):
    user = create_user(emulator)
    before = {k["kid"] for k in fetch_jwks(emulator, "/auth/keys")["keys"]}
    google_before = {k["kid"] for k in fetch_jwks(emulator, "/google/oauth2/v3/certs")["keys"]}
    old_token = authorize(emulator, user["sub"])["identityToken"]
    old_kid = jwt.get_unverified_header(old_token)["kid"]
    assert old_kid in before

    response = emulator.post("/emulator/keys/rotate")
    assert response.status_code == 200, response.text

    after = {k["kid"] for k in fetch_jwks(emulator, "/auth/keys")["keys"]}
    assert old_kid in after, "the previous key must stay published for an overlap"
    assert after - before, "rotation must publish a new kid"
    google_after = {k["kid"] for k in fetch_jwks(emulator, "/google/oauth2/v3/certs")["keys"]}
    assert google_before & google_after and google_after - google_before

    # Tokens signed before the rotation still verify; new ones use the new key.
    verify_apple_token(emulator, old_token, NATIVE_CLIENT)
    new_token = authorize(emulator, user["sub"])["identityToken"]
    new_kid = jwt.get_unverified_header(new_token)["kid"]
    assert new_kid != old_kid and new_kid in after
    verify_apple_token(emulator, new_token, NATIVE_CLIENT)


# --------------------------------------------------------------------------------------------
# Google (PKCE, public client)
# --------------------------------------------------------------------------------------------


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = b64url(hashlib.sha256(verifier.encode("ascii")).digest())
    return verifier, challenge


def google_code(emu: Emulator, email: str, challenge: str, nonce: str, state: str) -> str:
    response = emu.post(
        "/google/o/oauth2/v2/auth",
        data={
            "client_id": GOOGLE_CLIENT,
            "redirect_uri": REDIRECT_URI,
            "response_type": "code",
            "scope": "openid email",
            "state": state,
            "nonce": nonce,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "email": email,
            "action": "continue",
        },
    )
    assert response.status_code == 302, f"{response.status_code}: {response.text}"
    location = urlsplit(response.headers["Location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == REDIRECT_URI, response.headers["Location"]
    query = parse_qs(location.query)
    assert query["state"] == [state]
    return query["code"][0]


def google_token(emu: Emulator, code: str, verifier: str) -> requests.Response:
    return emu.post(
        "/google/token",
        data={
            "client_id": GOOGLE_CLIENT,
            "code": code,
            "code_verifier": verifier,
            "grant_type": "authorization_code",
            "redirect_uri": REDIRECT_URI,
        },
    )


def test_google_wrong_verifier_is_invalid_grant(emulator):
    verifier, challenge = pkce_pair()
    code = google_code(emulator, f"g-{uuid.uuid4().hex[:10]}@example.com", challenge, "n1", "s1")
    response = google_token(emulator, code, verifier + "x")
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "invalid_grant"


def test_google_pkce_flow(emulator):
    email = f"someone-{uuid.uuid4().hex[:10]}@example.com"
    verifier, challenge = pkce_pair()
    nonce = secrets.token_urlsafe(16)
    code = google_code(emulator, email, challenge, nonce, "state-xyz")
    response = google_token(emulator, code, verifier)
    assert response.status_code == 200, response.text
    tokens = response.json()
    assert tokens["token_type"] == "Bearer"
    assert tokens["access_token"]
    claims = verify_google_token(emulator, tokens["id_token"])
    assert claims["iss"] in GOOGLE_ISSUERS
    assert claims["aud"] == GOOGLE_CLIENT
    assert claims["email"] == email
    assert claims["email_verified"] is True
    assert claims["nonce"] == nonce
    assert claims["at_hash"] == half_hash(tokens["access_token"])
    assert re.fullmatch(r"\d{21}", claims["sub"]), claims["sub"]

    # The code is single use.
    again = google_token(emulator, code, verifier)
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"

    # tokeninfo answers every claim as a string, as Google does.
    info = emulator.get("/google/tokeninfo", params={"id_token": tokens["id_token"]})
    assert info.status_code == 200, info.text
    info = info.json()
    assert isinstance(info["exp"], str) and info["exp"] == str(claims["exp"])
    assert isinstance(info["iat"], str) and info["iat"] == str(claims["iat"])
    assert info["email_verified"] == "true"
    assert info["aud"] == GOOGLE_CLIENT
    assert info["sub"] == claims["sub"]
    assert info["email"] == email


def test_google_tokeninfo_rejects_garbage(emulator):
    response = emulator.get("/google/tokeninfo", params={"id_token": "not.a.token"})
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_token"


# --------------------------------------------------------------------------------------------
# Microsoft, Facebook, Dropbox and a generic OpenID Connect issuer (`latchkey emulate` registers
# every client id at every provider, so GOOGLE_CLIENT works with each of them)
# --------------------------------------------------------------------------------------------

MS_TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"


def provider_sign_in(emu: Emulator, provider: str, sub: str, **extra) -> dict:
    body = {"provider": provider, "sub": sub, "clientId": GOOGLE_CLIENT, **extra}
    response = emu.post("/emulator/authorizations", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def provider_code_exchange(emu: Emulator, path: str, code: str, verifier: str) -> requests.Response:
    form = {"client_id": GOOGLE_CLIENT, "grant_type": "authorization_code", "code": code, "code_verifier": verifier}
    return emu.post(path, data=form)


def test_microsoft_tenant_issuer_keys_and_pkce_exchange(emulator):
    common = emulator.get("/microsoft/common/v2.0/.well-known/openid-configuration").json()
    assert common["issuer"] == "https://login.microsoftonline.com/{tenantid}/v2.0"
    keys = fetch_jwks(emulator, "/microsoft/common/discovery/v2.0/keys")["keys"]
    assert keys and all("alg" not in key and key["issuer"] == common["issuer"] for key in keys)

    user = create_user(emulator, email=f"ms-{uuid.uuid4().hex[:8]}@example.com", microsoftTenant=MS_TENANT)
    assert user["microsoftTenant"] == MS_TENANT
    verifier, challenge = pkce_pair()
    sub = user["subjects"]["microsoft"]
    signed = provider_sign_in(emulator, "microsoft", sub, nonce="ms-n", codeChallenge=challenge)
    issuer = f"https://login.microsoftonline.com/{MS_TENANT}/v2.0"
    keys_path = "/microsoft/common/discovery/v2.0/keys"
    claims = verify_token(emulator, signed["idToken"], jwks_path=keys_path, audience=GOOGLE_CLIENT, issuer=issuer)
    # What a multi-tenant verifier does: substitute tid into the template and compare exactly.
    assert common["issuer"].replace("{tenantid}", claims["tid"]) == claims["iss"]
    assert claims["ver"] == "2.0" and claims["email_verified"] is True and claims["nonce"] == "ms-n"

    path = "/microsoft/common/oauth2/v2.0/token"
    wrong = provider_code_exchange(emulator, path, signed["authorizationCode"], verifier + "x")
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant"
    tokens = provider_code_exchange(emulator, path, signed["authorizationCode"], verifier)
    assert tokens.status_code == 200, tokens.text
    body = tokens.json()
    assert body["token_type"] == "Bearer" and body["refresh_token"] and body["access_token"]
    claims = verify_token(emulator, body["id_token"], jwks_path=keys_path, audience=GOOGLE_CLIENT, issuer=issuer)
    assert claims["nonce"] == "ms-n" and claims["at_hash"] == half_hash(body["access_token"])
    replay = provider_code_exchange(emulator, path, signed["authorizationCode"], verifier)
    assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"


def test_facebook_limited_login_and_debug_token(emulator):
    discovery = emulator.get("/facebook/.well-known/openid-configuration/").json()
    assert discovery["issuer"] == "https://www.facebook.com"
    user = create_user(emulator, email=f"fb-{uuid.uuid4().hex[:8]}@example.com")
    fb_id = user["subjects"]["facebook"]
    signed = provider_sign_in(emulator, "facebook", fb_id, nonce="fb-n")
    claims = verify_token(
        emulator,
        signed["idToken"],
        jwks_path="/facebook/.well-known/oauth/openid/jwks/",
        audience=GOOGLE_CLIENT,
        issuer=discovery["issuer"],
    )
    assert claims["sub"] == fb_id and claims["nonce"] == "fb-n" and claims["jti"]

    app_token = f"{GOOGLE_CLIENT}|{GOOGLE_CLIENT}-secret"
    token = signed["accessToken"]
    debug = emulator.get("/facebook/debug_token", params={"input_token": token, "access_token": app_token})
    assert debug.status_code == 200, debug.text
    data = debug.json()["data"]
    assert isinstance(data, dict) and data["is_valid"] is True and data["type"] == "USER"
    assert data["app_id"] == GOOGLE_CLIENT and data["user_id"] == fb_id
    assert isinstance(data["expires_at"], int) and isinstance(data["data_access_expires_at"], int)
    wrong_app = emulator.get("/facebook/debug_token", params={"input_token": token, "access_token": f"{GOOGLE_CLIENT}|nope"})
    assert wrong_app.status_code == 400
    assert wrong_app.json()["error"]["type"] == "OAuthException" and wrong_app.json()["error"]["code"] == 190
    removed = emulator.delete("/facebook/me/permissions", params={"access_token": token})
    assert removed.json() == {"success": True}
    after = emulator.get("/facebook/debug_token", params={"input_token": token, "access_token": app_token})
    assert after.status_code == 200 and after.json()["data"]["is_valid"] is False


def test_dropbox_pkce_without_secret_account_and_revoke(emulator):
    user = create_user(emulator, email=f"db-{uuid.uuid4().hex[:8]}@example.com", givenName="Dee", familyName="Box")
    account_id = user["subjects"]["dropbox"]
    assert re.fullmatch(r"dbid:[A-Za-z0-9_-]{40}", account_id), account_id
    verifier, challenge = pkce_pair()
    signed = provider_sign_in(emulator, "dropbox", account_id, codeChallenge=challenge)
    tokens = provider_code_exchange(emulator, "/dropbox/oauth2/token", signed["authorizationCode"], verifier)
    assert tokens.status_code == 200, tokens.text
    body = tokens.json()
    assert body["token_type"] == "bearer" and body["account_id"] == account_id and body["refresh_token"]
    replay = provider_code_exchange(emulator, "/dropbox/oauth2/token", signed["authorizationCode"], verifier)
    assert replay.status_code == 400
    assert replay.json() == {"error": "invalid_grant", "error_description": "code doesn't exist or has expired"}

    bearer = {"Authorization": f"Bearer {body['access_token']}", "Content-Type": "application/json"}
    account = emulator.post("/dropbox/2/users/get_current_account", data="null", headers=bearer)
    assert account.status_code == 200, account.text
    account = account.json()
    assert account["account_id"] == account_id and account["name"]["display_name"] == "Dee Box"
    assert account["account_type"][".tag"] == "basic" and account["email_verified"] is True
    revoked = emulator.post("/dropbox/2/auth/token/revoke", headers=bearer)
    assert revoked.status_code == 200 and revoked.text == "null"
    dead = emulator.post("/dropbox/2/users/get_current_account", data="null", headers=bearer)
    assert dead.status_code == 401 and dead.json()["error"][".tag"] == "invalid_access_token"


def test_generic_oidc_issuer_is_the_base_url(emulator):
    discovery = emulator.get("/oidc/.well-known/openid-configuration").json()
    issuer = emulator.base_url + "/oidc"
    assert discovery["issuer"] == issuer and discovery["token_endpoint"] == issuer + "/token"
    assert discovery["code_challenge_methods_supported"] == ["S256"]
    user = create_user(emulator, email=f"oidc-{uuid.uuid4().hex[:8]}@example.com")
    verifier, challenge = pkce_pair()
    signed = provider_sign_in(emulator, "oidc", user["subjects"]["oidc"], nonce="o-n", codeChallenge=challenge)
    verify_token(emulator, signed["idToken"], jwks_path="/oidc/jwks", audience=GOOGLE_CLIENT, issuer=issuer)
    tokens = provider_code_exchange(emulator, "/oidc/token", signed["authorizationCode"], verifier)
    assert tokens.status_code == 200, tokens.text
    id_token = tokens.json()["id_token"]
    claims = verify_token(emulator, id_token, jwks_path="/oidc/jwks", audience=GOOGLE_CLIENT, issuer=issuer)
    assert claims["nonce"] == "o-n" and claims["sub"] == user["subjects"]["oidc"]


def github_token(emu: Emulator, code: str, verifier: str, secret: str = GOOGLE_CLIENT + "-secret") -> requests.Response:
    form = {"client_id": GOOGLE_CLIENT, "client_secret": secret, "code": code, "code_verifier": verifier}
    return emu.post("/github/login/oauth/access_token", data=form, headers={"Accept": "application/json"})


def test_github_code_exchange_user_emails_and_grant_revocation(emulator):
    email = f"gh-{uuid.uuid4().hex[:8]}@example.com"
    user = create_user(emulator, email=email, givenName="Mona", familyName="Lisa")
    github_id = user["subjects"]["github"]
    assert re.fullmatch(r"[1-9]\d{7,8}", github_id), github_id
    verifier, challenge = pkce_pair()
    code = provider_sign_in(emulator, "github", github_id, codeChallenge=challenge)["authorizationCode"]
    assert re.fullmatch(r"[0-9a-f]{20}", code), code

    # GitHub answers refusals with 200 and an error member; a wrong secret does not spend the code.
    refused = github_token(emulator, code, verifier, secret="not-the-secret")
    assert refused.status_code == 200 and refused.json()["error"] == "incorrect_client_credentials", refused.text
    assert github_token(emulator, code, "x" * 43).json()["error"] == "bad_verification_code"
    verifier, challenge = pkce_pair()
    code = provider_sign_in(emulator, "github", github_id, codeChallenge=challenge)["authorizationCode"]
    tokens = github_token(emulator, code, verifier)
    assert tokens.status_code == 200, tokens.text
    body = tokens.json()
    assert body["access_token"].startswith("gho_") and body["token_type"] == "bearer", body
    assert set(body["scope"].split(",")) == {"read:user", "user:email"} and "refresh_token" not in body
    assert github_token(emulator, code, verifier).json()["error"] == "bad_verification_code"

    bearer = {"Authorization": f"Bearer {body['access_token']}", "Accept": "application/vnd.github+json"}
    profile = emulator.get("/github/api/user", headers=bearer)
    assert profile.status_code == 200, profile.text
    profile = profile.json()
    assert profile["id"] == int(github_id) and profile["type"] == "User" and profile["name"] == "Mona Lisa"
    assert profile["email"] is None  # a private address: only /user/emails shows it
    assert emulator.get("/github/api/user/emails", headers=bearer).json() == [
        {"email": email, "primary": True, "verified": True, "visibility": "private"}
    ]

    app = (GOOGLE_CLIENT, GOOGLE_CLIENT + "-secret")
    application = f"/github/api/applications/{GOOGLE_CLIENT}"
    checked = emulator.post(application + "/token", json={"access_token": body["access_token"]}, auth=app)
    assert checked.status_code == 200 and checked.json()["user"]["id"] == int(github_id), checked.text
    assert emulator.post(application + "/token", json={"access_token": body["access_token"]}, auth=(GOOGLE_CLIENT, "wrong")).status_code == 404
    revoked = emulator.delete(application + "/grant", json={"access_token": body["access_token"]}, auth=app)
    assert revoked.status_code == 204, revoked.text
    dead = emulator.get("/github/api/user", headers=bearer)
    assert dead.status_code == 401 and dead.json()["message"] == "Bad credentials"
    assert emulator.post(application + "/token", json={"access_token": body["access_token"]}, auth=app).status_code == 404


def test_discord_pkce_public_client_user_rotation_and_revocation(emulator):
    email = f"dc-{uuid.uuid4().hex[:8]}@example.com"
    user = create_user(emulator, email=email, givenName="Ada", familyName="Lovelace")
    snowflake = user["subjects"]["discord"]
    assert re.fullmatch(r"1\d{17}", snowflake), snowflake
    verifier, challenge = pkce_pair()
    code = provider_sign_in(emulator, "discord", snowflake, codeChallenge=challenge)["authorizationCode"]
    wrong = provider_code_exchange(emulator, "/discord/api/oauth2/token", code, "x" * 43)
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant", wrong.text
    tokens = provider_code_exchange(emulator, "/discord/api/oauth2/token", code, verifier)
    assert tokens.status_code == 200, tokens.text
    body = tokens.json()
    assert body["token_type"] == "Bearer" and body["expires_in"] == 604800 and body["refresh_token"] and "id_token" not in body
    me = emulator.get("/discord/api/users/@me", headers={"Authorization": f"Bearer {body['access_token']}"}).json()
    assert me["id"] == snowflake and me["email"] == email and me["verified"] is True and me["global_name"] == "Ada Lovelace"

    # Each refresh answers a new refresh token; the old one stops working.
    refresh = {"grant_type": "refresh_token", "refresh_token": body["refresh_token"], "client_id": GOOGLE_CLIENT}
    rotated = emulator.post("/discord/api/oauth2/token", data=refresh).json()["refresh_token"]
    assert rotated != body["refresh_token"]
    assert emulator.post("/discord/api/oauth2/token", data=refresh).json()["error"] == "invalid_grant"
    revoked = emulator.post("/discord/api/oauth2/token/revoke", data={"token": rotated, "client_id": GOOGLE_CLIENT})
    assert revoked.status_code == 200, revoked.text
    gone = emulator.post("/discord/api/oauth2/token", data={**refresh, "refresh_token": rotated})
    assert gone.json()["error"] == "invalid_grant"


def test_x_confidential_client_users_me_without_email_and_revocation(emulator):
    user = create_user(emulator, email=f"x-{uuid.uuid4().hex[:8]}@example.com", givenName="Ada")
    x_id = user["subjects"]["x"]
    assert re.fullmatch(r"17\d{17}", x_id), x_id
    verifier, challenge = pkce_pair()
    code = provider_sign_in(emulator, "x", x_id, codeChallenge=challenge)["authorizationCode"]
    form = {"grant_type": "authorization_code", "code": code, "code_verifier": verifier}
    refused = emulator.post("/x/2/oauth2/token", data=form, auth=(GOOGLE_CLIENT, "not-the-secret"))
    assert refused.status_code == 401, refused.text
    tokens = emulator.post("/x/2/oauth2/token", data=form, auth=(GOOGLE_CLIENT, GOOGLE_CLIENT + "-secret"))
    assert tokens.status_code == 200, tokens.text
    body = tokens.json()
    assert body["refresh_token"] and "offline.access" in body["scope"] and "id_token" not in body
    me = emulator.get("/x/2/users/me", headers={"Authorization": f"Bearer {body['access_token']}"}).json()
    assert me["data"]["id"] == x_id and "email" not in me["data"]
    revoked = emulator.post("/x/2/oauth2/revoke", data={"token": body["refresh_token"], "client_id": GOOGLE_CLIENT})
    assert revoked.status_code == 200 and revoked.json() == {"revoked": True}
    dead = emulator.get("/x/2/users/me", headers={"Authorization": f"Bearer {body['access_token']}"})
    assert dead.status_code == 401 and dead.json()["title"] == "Unauthorized"


def test_gitlab_issuer_is_its_base_url_with_gitlab_paths(emulator):
    issuer = emulator.base_url + "/gitlab"
    discovery = emulator.get("/gitlab/.well-known/openid-configuration").json()
    assert discovery["issuer"] == issuer and discovery["jwks_uri"] == issuer + "/oauth/discovery/keys"
    assert discovery["token_endpoint"] == issuer + "/oauth/token" and discovery["revocation_endpoint"] == issuer + "/oauth/revoke"
    user = create_user(emulator, email=f"gl-{uuid.uuid4().hex[:8]}@example.com")
    sub = user["subjects"]["gitlab"]
    assert re.fullmatch(r"[1-9]\d{6,7}", sub), sub
    verifier, challenge = pkce_pair()
    signed = provider_sign_in(emulator, "gitlab", sub, nonce="g-n", codeChallenge=challenge)
    verify_token(emulator, signed["idToken"], jwks_path="/gitlab/oauth/discovery/keys", audience=GOOGLE_CLIENT, issuer=issuer)
    tokens = provider_code_exchange(emulator, "/gitlab/oauth/token", signed["authorizationCode"], verifier)
    assert tokens.status_code == 200, tokens.text
    body = tokens.json()
    claims = verify_token(emulator, body["id_token"], jwks_path="/gitlab/oauth/discovery/keys", audience=GOOGLE_CLIENT, issuer=issuer)
    assert claims["sub"] == sub and claims["nonce"] == "g-n"
    revoked = emulator.post("/gitlab/oauth/revoke", data={"token": body["refresh_token"], "client_id": GOOGLE_CLIENT})
    assert revoked.status_code == 200, revoked.text
    refresh = {"grant_type": "refresh_token", "refresh_token": body["refresh_token"], "client_id": GOOGLE_CLIENT}
    assert emulator.post("/gitlab/oauth/token", data=refresh).json()["error"] == "invalid_grant"


def test_slack_token_method_answers_ok_false_and_no_revocation_endpoint(emulator):
    issuer = emulator.base_url + "/slack"
    discovery = emulator.get("/slack/.well-known/openid-configuration").json()
    assert discovery["issuer"] == issuer and "revocation_endpoint" not in discovery
    user = create_user(emulator, email=f"sl-{uuid.uuid4().hex[:8]}@example.com")
    sub = user["subjects"]["slack"]
    assert re.fullmatch(r"U[0-9A-F]{10}", sub), sub
    verifier, challenge = pkce_pair()
    signed = provider_sign_in(emulator, "slack", sub, nonce="s-n", codeChallenge=challenge)
    token_path = "/slack/api/openid.connect.token"
    form = {"client_id": GOOGLE_CLIENT, "client_secret": GOOGLE_CLIENT + "-secret", "grant_type": "authorization_code",
            "code": signed["authorizationCode"]}
    wrong = emulator.post(token_path, data={**form, "code_verifier": "x" * 43})
    assert wrong.status_code == 200 and wrong.json() == {"ok": False, "error": "invalid_code_verifier"}, wrong.text
    tokens = emulator.post(token_path, data={**form, "code_verifier": verifier})
    assert tokens.status_code == 200, tokens.text
    body = tokens.json()
    assert body["ok"] is True and "refresh_token" not in body
    claims = verify_token(emulator, body["id_token"], jwks_path="/slack/openid/connect/keys", audience=GOOGLE_CLIENT, issuer=issuer)
    assert claims["sub"] == sub and claims["nonce"] == "s-n"
    replay = emulator.post(token_path, data={**form, "code_verifier": verifier})
    assert replay.status_code == 200 and replay.json() == {"ok": False, "error": "invalid_code"}


def test_line_sdk_tokens_are_es256_and_web_login_tokens_hs256_with_the_channel_secret(emulator):
    issuer = emulator.base_url + "/line"
    discovery = emulator.get("/line/.well-known/openid-configuration").json()
    assert discovery["issuer"] == issuer and discovery["id_token_signing_alg_values_supported"] == ["ES256"]
    assert discovery["token_endpoint"] == issuer + "/oauth2/v2.1/token" and discovery["revocation_endpoint"] == issuer + "/oauth2/v2.1/revoke"
    user = create_user(emulator, email=f"ln-{uuid.uuid4().hex[:8]}@example.com")
    sub = user["subjects"]["line"]
    assert re.fullmatch(r"U[0-9a-f]{32}", sub), sub
    verifier, challenge = pkce_pair()
    signed = provider_sign_in(emulator, "line", sub, nonce="l-n", codeChallenge=challenge)
    # The app SDK's ID token: ES256, with a kid among the published keys.
    header = jwt.get_unverified_header(signed["idToken"])
    assert header["alg"] == "ES256" and header.get("kid"), header
    keys = jwt.PyJWKSet.from_dict(fetch_jwks(emulator, "/line/oauth2/v2.1/certs"))
    claims = jwt.decode(signed["idToken"], keys[header["kid"]].key, algorithms=["ES256"], audience=GOOGLE_CLIENT, issuer=issuer)
    assert claims["sub"] == sub and claims["nonce"] == "l-n"
    # The web login's: HS256 with the channel secret, and no kid.
    secret = GOOGLE_CLIENT + "-channel-secret-0123456789abcdef"
    form = {"grant_type": "authorization_code", "code": signed["authorizationCode"], "code_verifier": verifier, "client_id": GOOGLE_CLIENT,
            "client_secret": secret}
    tokens = emulator.post("/line/oauth2/v2.1/token", data=form)
    assert tokens.status_code == 200, tokens.text
    body = tokens.json()
    web_header = jwt.get_unverified_header(body["id_token"])
    assert web_header["alg"] == "HS256" and "kid" not in web_header, web_header
    web = jwt.decode(body["id_token"], secret, algorithms=["HS256"], audience=GOOGLE_CLIENT, issuer=issuer)
    assert web["sub"] == sub and web["nonce"] == "l-n"
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(body["id_token"], "another-secret-0123456789abcdef01", algorithms=["HS256"], audience=GOOGLE_CLIENT, issuer=issuer)
    # Revocation takes an access token and ends the grant behind it.
    refused = emulator.post("/line/oauth2/v2.1/revoke", data={"access_token": body["access_token"], "client_id": GOOGLE_CLIENT})
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_client", refused.text
    revoked = emulator.post("/line/oauth2/v2.1/revoke", data={"access_token": body["access_token"], "client_id": GOOGLE_CLIENT,
                                                               "client_secret": secret})
    assert revoked.status_code == 200, revoked.text
    refresh = {"grant_type": "refresh_token", "refresh_token": body["refresh_token"], "client_id": GOOGLE_CLIENT, "client_secret": secret}
    assert emulator.post("/line/oauth2/v2.1/token", data=refresh).json()["error"] == "invalid_grant"
