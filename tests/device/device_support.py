"""What tests/device shares: a `latchkey serve` whose `publicUrl` is the URL it is called at (so a DPoP proof's `htu`
is that URL), DPoP proofs made with jwcrypto, the access token's claims checked against the server's JWKS with
jwcrypto, and an install's App Attest key made by the emulator's stand-in of DCAppAttestService.

Nothing here comes from Latchkey's code: the proofs, thumbprints and client data hashes follow RFC 9449, RFC 7638
and Apple's documentation."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests
from jwcrypto import jwk, jwt

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
import latchkey_process  # noqa: E402

CLIENT_ID = "com.example.app"
TEAM = re.compile(r"Apple \(team ([A-Z0-9]+)\)")


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


@dataclass
class Server:
    url: str
    emulator: str | None
    served: latchkey_process.Served

    @property
    def team_id(self) -> str:
        """The team the `--dev` emulator signs for, as `serve --dev` prints it at start."""
        match = TEAM.search("".join(self.served.output))
        assert match, "serve --dev did not print its emulated team:\n" + "".join(self.served.output)
        return match.group(1)

    def metric(self, name: str, labels: str) -> float:
        """One sample of /metrics (Prometheus text), 0 when the series is not there yet."""
        text = requests.get(self.url + "/metrics", timeout=30).text
        for line in text.splitlines():
            if line.startswith(f"{name}{{{labels}}} "):
                return float(line.rsplit(" ", 1)[1])
        return 0.0


@contextmanager
def serve(settings: dict[str, str], dev: bool = False, prefix: str = "latchkey-device-"):
    """`latchkey serve` (tests/support) with `publicUrl` set to `http://127.0.0.1:PORT`, PORT being the port it listens
    on. tests/support picks the port itself; its first pick is made ours for the time of the start."""
    port = latchkey_process.free_port()
    original = latchkey_process.free_port
    picks = [port]
    latchkey_process.free_port = lambda: picks.pop() if picks else original()
    running = latchkey_process.serve({**settings, "LATCHKEY_PUBLIC_URL": f"http://127.0.0.1:{port}"}, dev=dev, prefix=prefix)
    try:
        served = running.__enter__()
    finally:
        latchkey_process.free_port = original
    try:
        # tests/support yields when the output ends too, and may then see the process before it has exited: a serve
        # that never said it listens did not start.
        if not any(latchkey_process.LISTENING.search(line) for line in served.output):
            pytest.fail("serve did not start:\n" + "".join(served.output))
        assert served.port == port, (served.port, port)
        yield Server(url=served.url, emulator=f"http://127.0.0.1:{served.emulator_port}" if served.emulator_port else None, served=served)
    finally:
        running.__exit__(None, None, None)


# MARK: - DPoP (RFC 9449) with jwcrypto


def new_key() -> jwk.JWK:
    return jwk.JWK.generate(kty="EC", crv="P-256")


def rfc7638_thumbprint(key: jwk.JWK) -> str:
    """RFC 7638 by hand: SHA-256 of the required members in lexical order, no white space, base64url."""
    public = key.export_public(as_dict=True)
    canonical = json.dumps({name: public[name] for name in ("crv", "kty", "x", "y")}, separators=(",", ":"), sort_keys=True)
    return b64url(sha256(canonical.encode()))


def ath(access_token: str) -> str:
    return b64url(sha256(access_token.encode("ascii")))


def proof(
    key: jwk.JWK, htm: str, htu: str, *, access_token: str | None = None, iat: int | None = None, nonce: str | None = None,
    with_ath: bool = True,
) -> str:
    """A DPoP proof JWT (typ dpop+jwt, ES256, the public jwk in its header) for `htm` `htu`; with `access_token`, its
    `ath` (unless `with_ath` is False)."""
    claims: dict = {"jti": str(uuid.uuid4()), "htm": htm, "htu": htu, "iat": int(time.time()) if iat is None else iat}
    if access_token is not None and with_ath:
        claims["ath"] = ath(access_token)
    if nonce is not None:
        claims["nonce"] = nonce
    token = jwt.JWT(header={"typ": "dpop+jwt", "alg": "ES256", "jwk": key.export_public(as_dict=True)}, claims=claims)
    token.make_signed_token(key)
    return token.serialize()


def claims(server: Server, access_token: str) -> dict:
    """The access token's claims, its signature checked with the server's /.well-known/jwks.json (jwcrypto)."""
    keys = jwk.JWKSet.from_json(requests.get(server.url + "/.well-known/jwks.json", timeout=30).text)
    token = jwt.JWT(jwt=access_token, key=keys, expected_type="JWS")
    header = json.loads(token.header)
    assert header["typ"] == "at+jwt" and header["alg"] == "ES256", header
    return json.loads(token.claims)


def post(server: Server, path: str, body: dict | None = None, *, form: dict | None = None, dpop: str | None = None,
         authorization: str | None = None) -> requests.Response:
    headers = {}
    if dpop is not None:
        headers["DPoP"] = dpop
    if authorization is not None:
        headers["Authorization"] = authorization
    if form is not None:
        return requests.post(server.url + path, data=form, headers=headers, timeout=30)
    return requests.post(server.url + path, json={} if body is None else body, headers=headers, timeout=30)


def refresh(server: Server, refresh_token: str, dpop: str | None = None) -> requests.Response:
    return post(server, "/v1/token", form={"grant_type": "refresh_token", "refresh_token": refresh_token}, dpop=dpop)


def me(server: Server, scheme: str, access_token: str, dpop: str | None = None) -> requests.Response:
    headers = {"Authorization": f"{scheme} {access_token}"}
    if dpop is not None:
        headers["DPoP"] = dpop
    return requests.get(server.url + "/v1/me", headers=headers, timeout=30)


def refused(response: requests.Response, status: int, error: str, mentions: str | None = None) -> dict:
    """Asserts an OAuth-style refusal: the status, the `error` code and, if given, a word of its description."""
    body = response.json()
    assert (response.status_code, body.get("error")) == (status, error), (response.status_code, body)
    if mentions is not None:
        assert mentions in body.get("error_description", ""), body
    return body


def apple_user(server: Server) -> str:
    """A new user of the emulator's Apple: their `sub`."""
    user = requests.post(server.emulator + "/emulator/users", json={}, timeout=30)
    assert user.status_code == 201, user.text
    return user.json()["sub"]


def apple_authorization(server: Server, sub: str | None = None) -> dict:
    """An authorization of the emulator's Apple user `sub` (a new user unless given): the body of `POST /v1/auth/apple`."""
    raw_nonce = secrets.token_urlsafe(24)
    made = requests.post(
        server.emulator + "/emulator/authorizations",
        json={"sub": sub or apple_user(server), "clientId": CLIENT_ID, "nonce": hashlib.sha256(raw_nonce.encode()).hexdigest()}, timeout=30)
    assert made.status_code == 201, made.text
    authorization = made.json()
    return {"identityToken": authorization["identityToken"], "rawNonce": raw_nonce, "authorizationCode": authorization["authorizationCode"]}


# MARK: - App Attest through the emulator's stand-in


def client_data_hash(challenge: str, thumbprint: str | None) -> bytes:
    """What the app gives attestKey / generateAssertion: SHA-256 of `challenge.thumbprint` (UTF-8), or of the challenge
    alone for a sign-in without a DPoP key."""
    return sha256(client_data(challenge, thumbprint))


def client_data(challenge: str, thumbprint: str | None) -> bytes:
    return (challenge if thumbprint is None else f"{challenge}.{thumbprint}").encode()


@dataclass
class Install:
    """One app install: its DPoP key, and the App Attest key the emulator made for it (DCAppAttestService)."""

    server: Server
    app_id: str
    dpop: jwk.JWK = field(default_factory=new_key)
    key_id: str | None = None

    @property
    def thumbprint(self) -> str:
        return self.dpop.thumbprint()

    def challenge(self) -> str:
        answer = requests.post(self.server.url + "/v1/attest/challenge", timeout=30)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["expiresIn"] > 0 and answer.headers.get("Cache-Control") == "no-store", (body, answer.headers)
        return body["challenge"]

    def attest(self, challenge: str, *, app_id: str | None = None, thumbprint: str | None = "mine") -> dict:
        """A new key attested over `challenge` (and `thumbprint`: the install's own unless given; None for none): the
        emulator's answer {keyId, attestation}, both standard base64. The install keeps the key."""
        thumbprint = self.thumbprint if thumbprint == "mine" else thumbprint
        made = requests.post(
            self.server.emulator + "/emulator/appattest/attestations",
            json={"appId": app_id or self.app_id, "clientDataHash": b64url(client_data_hash(challenge, thumbprint)), "environment": "development"},
            timeout=30)
        assert made.status_code == 200, made.text
        self.key_id = made.json()["keyId"]
        return made.json()

    def attestation(self, challenge: str, **options) -> dict:
        """The sign-in's `appAttest` member for a new key attested over `challenge`."""
        made = self.attest(challenge, **options)
        return {"keyId": made["keyId"], "attestation": made["attestation"], "challenge": challenge}

    def assertion(self, challenge: str, thumbprint: str | None = "mine") -> dict:
        """The sign-in's `appAttest` member: an assertion of the install's key over `challenge`."""
        assert self.key_id, "attest first"
        thumbprint = self.thumbprint if thumbprint == "mine" else thumbprint
        made = requests.post(
            self.server.emulator + "/emulator/appattest/assertions",
            json={"keyId": self.key_id, "clientDataHash": b64url(client_data_hash(challenge, thumbprint))}, timeout=30)
        assert made.status_code == 200, made.text
        return {"keyId": self.key_id, "assertion": made.json()["assertion"], "challenge": challenge}

    def sign_in(self, evidence: dict | None, *, with_dpop: bool = True, path: str = "/v1/auth/anonymous", body: dict | None = None) -> requests.Response:
        """A sign-in (a guest's unless `path` and `body` say otherwise) with `evidence` as its `appAttest` member and a
        DPoP proof by the install's key."""
        payload = dict(body or {})
        if evidence is not None:
            payload["appAttest"] = evidence
        dpop = proof(self.dpop, "POST", self.server.url + path) if with_dpop else None
        return post(self.server, path, payload, dpop=dpop)
