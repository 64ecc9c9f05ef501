"""Latchkey's passkey (WebAuthn) endpoints, driven from outside by a software authenticator built with Yubico's
`fido2` package and `cryptography`: it shares no code with Latchkey. A real `latchkey serve --dev` is started on
loopback; users sign in through its emulator, add passkeys, sign in with them, sign up with them, and every refusal is
checked by its HTTP status and its error code.

The authenticator is first judged by `fido2`'s own relying party (`fido2.server.Fido2Server`), so that a passing
refusal below is Latchkey's check working, not the authenticator being wrong."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import sys
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from fido2.cose import ES256
from fido2.server import Fido2Server
from fido2.utils import websafe_decode, websafe_encode
from fido2.webauthn import Aaguid, AttestationObject, AttestedCredentialData, AuthenticatorData, CollectedClientData

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
import latchkey_process  # noqa: E402
from latchkey_process import apple_sign_in, call, serve  # noqa: E402

CLIENT_ID = "com.example.app"
RP_ID = "localhost"
FLAG = AuthenticatorData.FLAG
# A synced passkey, as iCloud Keychain or Google Password Manager make them.
REGISTRATION_FLAGS = FLAG.UP | FLAG.UV | FLAG.BE | FLAG.BS | FLAG.AT
ASSERTION_FLAGS = FLAG.UP | FLAG.UV | FLAG.BE | FLAG.BS


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


# MARK: - The software authenticator


@dataclass
class Passkey:
    """One discoverable credential the authenticator holds."""

    credential_id: bytes
    private_key: ec.EllipticCurvePrivateKey
    rp_id: str
    user_handle: bytes
    counter: int = 0

    @property
    def id(self) -> str:
        return websafe_encode(self.credential_id)


@dataclass
class SoftwareAuthenticator:
    """A platform authenticator and the browser around it, in software: ES256 (P-256) discoverable credentials,
    attestation `none`, user presence and verification always given, backup eligible and backed up. Its answers are
    the WebAuthn Level 3 JSON forms that `PublicKeyCredential.toJSON()` writes, binary as unpadded base64url."""

    origin: str
    passkeys: list[Passkey] = field(default_factory=list)

    def create(self, options: dict, *, credential: Passkey | None = None) -> tuple[Passkey, dict]:
        """`navigator.credentials.create()` for `options` (PublicKeyCredentialCreationOptionsJSON): a new credential,
        or, with `credential`, the attestation of one held already (what a faulty client would send despite
        `excludeCredentials`). Returns the passkey and its RegistrationResponseJSON."""
        assert any(parameter["type"] == "public-key" and parameter["alg"] == ES256.ALGORITHM for parameter in options["pubKeyCredParams"]), options
        rp_id = options["rp"].get("id") or RP_ID
        if credential is None:
            credential = Passkey(
                credential_id=secrets.token_bytes(32), private_key=ec.generate_private_key(ec.SECP256R1()), rp_id=rp_id,
                user_handle=websafe_decode(options["user"]["id"]))
            self.passkeys.append(credential)
        attested = AttestedCredentialData.create(Aaguid.NONE, credential.credential_id, ES256.from_cryptography_key(credential.private_key.public_key()))
        authenticator_data = AuthenticatorData.create(sha256(rp_id.encode()), REGISTRATION_FLAGS, 0, attested)
        attestation = AttestationObject.create("none", authenticator_data, {})
        client_data = CollectedClientData.create(type="webauthn.create", challenge=options["challenge"], origin=self.origin, cross_origin=False)
        return credential, {
            "id": credential.id,
            "rawId": credential.id,
            "type": "public-key",
            "response": {
                "clientDataJSON": websafe_encode(client_data),
                "attestationObject": websafe_encode(attestation),
                "transports": ["internal", "hybrid"],
            },
            "authenticatorAttachment": "platform",
            "clientExtensionResults": {},
        }

    def get(
        self, options: dict, credential: Passkey, *, origin: str | None = None, rp_id: str | None = None, flags: FLAG = ASSERTION_FLAGS,
        counter: int | None = None,
    ) -> dict:
        """`navigator.credentials.get()` for `options` (PublicKeyCredentialRequestOptionsJSON) with `credential`: its
        AuthenticationResponseJSON. The counter goes up by one each assertion unless `counter` sets it; `origin`,
        `rp_id` and `flags` forge what an honest authenticator would not send."""
        credential.counter = credential.counter + 1 if counter is None else counter
        client_data = CollectedClientData.create(type="webauthn.get", challenge=options["challenge"], origin=origin or self.origin, cross_origin=False)
        authenticator_data = AuthenticatorData.create(sha256((rp_id or credential.rp_id).encode()), flags, credential.counter)
        signature = credential.private_key.sign(bytes(authenticator_data) + sha256(client_data), ec.ECDSA(hashes.SHA256()))
        return {
            "id": credential.id,
            "rawId": credential.id,
            "type": "public-key",
            "response": {
                "clientDataJSON": websafe_encode(client_data),
                "authenticatorData": websafe_encode(authenticator_data),
                "signature": websafe_encode(signature),
                "userHandle": websafe_encode(credential.user_handle),
            },
            "authenticatorAttachment": "platform",
            "clientExtensionResults": {},
        }


def test_the_authenticator_satisfies_fido2s_own_relying_party() -> None:
    """No server needed: fido2's Fido2Server accepts what the authenticator makes, and refuses each forgery used
    below for the reason it is meant to fail."""
    origin = "http://localhost:8080"
    relying_party = Fido2Server({"id": RP_ID, "name": "Latchkey"}, attestation="none", verify_origin=lambda sent: sent == origin)
    authenticator = SoftwareAuthenticator(origin)
    begun, state = relying_party.register_begin(
        {"id": b"user-handle-1", "name": "jane", "displayName": "Jane"}, resident_key_requirement="required", user_verification="required")
    options = json.loads(json.dumps(dict(begun.public_key)))
    passkey, registration = authenticator.create(options)

    attestation = AttestationObject(websafe_decode(registration["response"]["attestationObject"]))
    assert attestation.fmt == "none" and attestation.att_stmt == {}
    data = attestation.auth_data
    assert data.rp_id_hash == sha256(RP_ID.encode()) and data.counter == 0 and data.flags == REGISTRATION_FLAGS
    assert data.credential_data.credential_id == passkey.credential_id and data.credential_data.aaguid == Aaguid.NONE
    assert isinstance(data.credential_data.public_key, ES256)
    client_data = CollectedClientData(websafe_decode(registration["response"]["clientDataJSON"]))
    assert client_data.type == "webauthn.create" and client_data.origin == origin and client_data.cross_origin is False
    assert websafe_encode(client_data.challenge) == options["challenge"]
    for text in (registration["id"], registration["rawId"], *(value for value in registration["response"].values() if isinstance(value, str))):
        assert "=" not in text and "+" not in text and "/" not in text
    registered = relying_party.register_complete(state, registration).credential_data

    begun, state = relying_party.authenticate_begin(user_verification="required")
    options = json.loads(json.dumps(dict(begun.public_key)))
    assertion = authenticator.get(options, passkey)
    data = AuthenticatorData(websafe_decode(assertion["response"]["authenticatorData"]))
    assert data.flags == ASSERTION_FLAGS and data.counter == 1 and data.credential_data is None
    assert websafe_decode(assertion["response"]["userHandle"]) == b"user-handle-1"
    assert relying_party.authenticate_complete(state, [registered], assertion) == registered
    assert authenticator.get(options, passkey)["response"]["authenticatorData"] != assertion["response"]["authenticatorData"]  # the counter moved

    forgeries = {
        "Invalid origin": {"origin": "http://evil.localhost:1"},
        "Wrong RP ID hash": {"rp_id": "example.com"},
        "User verification required": {"flags": FLAG.UP | FLAG.BE | FLAG.BS},
    }
    for reason, forgery in forgeries.items():
        with pytest.raises(ValueError, match=reason):
            relying_party.authenticate_complete(state, [registered], authenticator.get(options, passkey, **forgery))
    tampered = authenticator.get(options, passkey)
    tampered["response"]["signature"] = websafe_encode(passkey.private_key.sign(b"something else", ec.ECDSA(hashes.SHA256())))
    with pytest.raises(ValueError, match="Invalid signature"):
        relying_party.authenticate_complete(state, [registered], tampered)


# MARK: - A real server


@dataclass
class Server:
    url: str
    emulator: str
    origin: str


@contextmanager
def passkey_server(allow_sign_up: bool):
    """`latchkey serve --dev` with passkeys for `localhost` and the origin `http://localhost:<its port>`. The port
    must be known before the server starts, so `serve` is handed it as the first "free port" it asks for."""
    port = latchkey_process.free_port()
    origin = f"http://localhost:{port}"
    settings = {
        "LATCHKEY_PASSKEYS_RP_ID": RP_ID,
        "LATCHKEY_PASSKEYS_ORIGINS": origin,
        "LATCHKEY_PASSKEYS_ALLOW_SIGN_UP": "true" if allow_sign_up else "false",
        # Many sign-ins from 127.0.0.1 within a minute: these tests are not about rate limits.
        "LATCHKEY_RATE_LIMIT_PER_IP": "100000",
        "LATCHKEY_RATE_LIMIT_PER_SUBJECT": "1000",
    }
    original = latchkey_process.free_port
    ports = iter([port])
    with ExitStack() as stack:
        latchkey_process.free_port = lambda: next(ports, None) or original()
        try:
            served = stack.enter_context(serve(settings, dev=True, prefix="latchkey-passkeys-"))
        finally:
            latchkey_process.free_port = original
        assert served.port == port
        yield Server(url=served.url, emulator=f"http://127.0.0.1:{served.emulator_port}", origin=origin)


@pytest.fixture(scope="module")
def server():
    """Passkeys on, passkey sign-up off (the default)."""
    with passkey_server(allow_sign_up=False) as served:
        yield served


@pytest.fixture(scope="module")
def open_server():
    """Passkeys on, passkey sign-up on."""
    with passkey_server(allow_sign_up=True) as served:
        yield served


def refused(answer: tuple[int, dict], status: int, code: str) -> None:
    got_status, body = answer
    assert (got_status, body.get("error")) == (status, code), f"expected {status} {code}, got {got_status} {body}"
    assert isinstance(body.get("error_description"), str) and body["error_description"], body


def claims(access_token: str) -> dict:
    """The access token's payload, unverified (the server's own tests check its signature)."""
    payload = access_token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def sign_in_with_apple(server: Server) -> dict:
    """A new user of the emulator, signed in with Apple: the sign-in answer."""
    return apple_sign_in(server.emulator, server.url, CLIENT_ID)


def add_passkey(server: Server, authenticator: SoftwareAuthenticator, access_token: str, name: str | None = None) -> tuple[Passkey, dict, dict]:
    """Creation options, a new credential, and its registration: the passkey, the options and the 201 answer."""
    status, options = call(f"{server.url}/v1/me/passkeys/options", bearer=access_token, empty=True)
    assert status == 200, options
    passkey, registration = authenticator.create(options)
    body = {"credential": registration} | ({"name": name} if name is not None else {})
    status, added = call(f"{server.url}/v1/me/passkeys", body, bearer=access_token)
    assert status == 201, added
    return passkey, options, added


def sign_in_options(server: Server) -> dict:
    status, options = call(f"{server.url}/v1/auth/passkey/options", {})
    assert status == 200, options
    assert isinstance(options.get("challengeId"), str) and options["challengeId"], options
    return options


def sign_in_with_passkey(server: Server, authenticator: SoftwareAuthenticator, passkey: Passkey, **forgery) -> tuple[int, dict]:
    options = sign_in_options(server)
    assertion = authenticator.get(options, passkey, **forgery)
    return call(f"{server.url}/v1/auth/passkey", {"challengeId": options["challengeId"], "credential": assertion})


def sign_up(server: Server, authenticator: SoftwareAuthenticator, display_name: str = "Jane Passkey") -> tuple[Passkey, dict, dict]:
    """A new account made with a new passkey: the passkey, the creation options and the sign-in answer."""
    status, options = call(f"{server.url}/v1/auth/passkey/signup/options", {"displayName": display_name})
    assert status == 200, options
    passkey, registration = authenticator.create(options)
    status, answer = call(f"{server.url}/v1/auth/passkey/signup", {"challengeId": options["challengeId"], "credential": registration, "name": "My phone"})
    assert status == 200, answer
    return passkey, options, answer


def listed(server: Server, access_token: str) -> list[dict]:
    status, answer = call(f"{server.url}/v1/me/passkeys", bearer=access_token, method="GET")
    assert status == 200, answer
    return answer["passkeys"]


# MARK: - Adding a passkey and signing in with it


def test_a_signed_in_user_adds_a_passkey_and_signs_in_with_it(server: Server) -> None:
    session = sign_in_with_apple(server)
    user_id = session["user"]["id"]
    assert claims(session["accessToken"])["sub"] == user_id
    authenticator = SoftwareAuthenticator(server.origin)

    status, options = call(f"{server.url}/v1/me/passkeys/options", bearer=session["accessToken"], empty=True)
    assert status == 200, options
    assert options["rp"]["id"] == RP_ID and isinstance(options["rp"]["name"], str), options
    assert options["user"]["id"] and websafe_decode(options["user"]["id"]) and options["user"]["name"] and options["user"]["displayName"], options
    assert len(websafe_decode(options["challenge"])) >= 16, options
    assert {"type": "public-key", "alg": -7} in options["pubKeyCredParams"], options
    assert options["timeout"] > 0 and options["excludeCredentials"] == [], options
    selection = options["authenticatorSelection"]
    assert selection["residentKey"] == "required" and selection["requireResidentKey"] is True and selection["userVerification"] == "required", options
    assert options["attestation"] == "none", options

    passkey, registration = authenticator.create(options)
    status, added = call(f"{server.url}/v1/me/passkeys", {"credential": registration, "name": "Jane's laptop"}, bearer=session["accessToken"])
    assert status == 201, added
    assert added["id"] == passkey.id and added["name"] == "Jane's laptop", added
    assert added["backedUp"] is True and added["cloneSuspected"] is False and added["createdAt"], added
    assert listed(server, session["accessToken"]) == [added]

    # A second time, the new passkey is excluded.
    status, again = call(f"{server.url}/v1/me/passkeys/options", bearer=session["accessToken"], empty=True)
    assert status == 200, again
    assert [item["id"] for item in again["excludeCredentials"]] == [passkey.id] and again["user"]["id"] == options["user"]["id"], again
    assert all(item["type"] == "public-key" for item in again["excludeCredentials"]), again

    # Signing in: discoverable, so nothing names the credential before the authenticator does.
    status, request_options = call(f"{server.url}/v1/auth/passkey/options", empty=True)
    assert status == 200, request_options
    assert request_options["rpId"] == RP_ID and request_options["allowCredentials"] == [], request_options
    assert request_options["userVerification"] == "required" and request_options["timeout"] > 0 and request_options["challengeId"], request_options
    assertion = authenticator.get(request_options, passkey)
    assert websafe_decode(assertion["response"]["userHandle"]) == websafe_decode(options["user"]["id"])
    status, answer = call(f"{server.url}/v1/auth/passkey", {"challengeId": request_options["challengeId"], "credential": assertion})
    assert status == 200, answer
    assert answer["isNewUser"] is False and answer["user"]["id"] == user_id, answer
    assert answer["tokenType"] == "Bearer" and answer["expiresIn"] > 0 and answer["refreshToken"], answer
    token = claims(answer["accessToken"])
    assert token["idp"] == "passkey" and token["sub"] == user_id, token
    assert {"provider": "passkey", "subject": passkey.id} in [{"provider": item["provider"], "subject": item["subject"]} for item in answer["user"]["identities"]]

    status, me = call(f"{server.url}/v1/me", bearer=answer["accessToken"], method="GET")
    assert status == 200, me
    assert me["id"] == user_id, me
    providers = {(item["provider"], item["subject"]) for item in me["identities"]}
    assert ("passkey", passkey.id) in providers and any(provider == "apple" for provider, _ in providers), me

    # The list shows it used; signing in again (counter 2) works too.
    (item,) = listed(server, answer["accessToken"])
    assert item["id"] == passkey.id and item["lastUsedAt"] and item["cloneSuspected"] is False, item
    status, second = sign_in_with_passkey(server, authenticator, passkey)
    assert status == 200 and second["user"]["id"] == user_id, second


def test_the_request_options_take_an_empty_object_too(server: Server) -> None:
    status, options = call(f"{server.url}/v1/auth/passkey/options", {})
    assert status == 200 and options["challengeId"] and options["rpId"] == RP_ID, options


# MARK: - Refusals


def test_a_replayed_assertion_is_refused(server: Server) -> None:
    session = sign_in_with_apple(server)
    authenticator = SoftwareAuthenticator(server.origin)
    passkey, _, _ = add_passkey(server, authenticator, session["accessToken"])
    options = sign_in_options(server)
    body = {"challengeId": options["challengeId"], "credential": authenticator.get(options, passkey)}
    status, answer = call(f"{server.url}/v1/auth/passkey", body)
    assert status == 200, answer
    refused(call(f"{server.url}/v1/auth/passkey", body), 400, "challenge_expired")


def test_an_unknown_challenge_is_refused(server: Server) -> None:
    session = sign_in_with_apple(server)
    authenticator = SoftwareAuthenticator(server.origin)
    passkey, _, _ = add_passkey(server, authenticator, session["accessToken"])
    made_up = {"challenge": websafe_encode(secrets.token_bytes(32))}
    body = {"challengeId": made_up["challenge"], "credential": authenticator.get(made_up, passkey)}
    refused(call(f"{server.url}/v1/auth/passkey", body), 400, "challenge_expired")


def test_an_assertion_for_another_origin_is_refused(server: Server) -> None:
    session = sign_in_with_apple(server)
    authenticator = SoftwareAuthenticator(server.origin)
    passkey, _, _ = add_passkey(server, authenticator, session["accessToken"])
    refused(sign_in_with_passkey(server, authenticator, passkey, origin="http://evil.localhost:1"), 401, "invalid_credential")
    status, answer = sign_in_with_passkey(server, authenticator, passkey)
    assert status == 200, answer  # the passkey itself is fine


def test_an_assertion_for_another_rp_id_is_refused(server: Server) -> None:
    session = sign_in_with_apple(server)
    authenticator = SoftwareAuthenticator(server.origin)
    passkey, _, _ = add_passkey(server, authenticator, session["accessToken"])
    refused(sign_in_with_passkey(server, authenticator, passkey, rp_id="example.com"), 401, "invalid_credential")


def test_an_assertion_without_user_verification_is_refused(server: Server) -> None:
    session = sign_in_with_apple(server)
    authenticator = SoftwareAuthenticator(server.origin)
    passkey, _, _ = add_passkey(server, authenticator, session["accessToken"])
    refused(sign_in_with_passkey(server, authenticator, passkey, flags=FLAG.UP | FLAG.BE | FLAG.BS), 401, "invalid_credential")


def test_an_assertion_with_a_bad_signature_is_refused(server: Server) -> None:
    session = sign_in_with_apple(server)
    authenticator = SoftwareAuthenticator(server.origin)
    passkey, _, _ = add_passkey(server, authenticator, session["accessToken"])
    options = sign_in_options(server)
    assertion = authenticator.get(options, passkey)
    assertion["response"]["signature"] = websafe_encode(passkey.private_key.sign(b"something else", ec.ECDSA(hashes.SHA256())))
    refused(call(f"{server.url}/v1/auth/passkey", {"challengeId": options["challengeId"], "credential": assertion}), 401, "invalid_credential")


def test_a_counter_that_goes_backwards_blocks_the_passkey(server: Server) -> None:
    session = sign_in_with_apple(server)
    authenticator = SoftwareAuthenticator(server.origin)
    passkey, _, _ = add_passkey(server, authenticator, session["accessToken"])
    status, answer = sign_in_with_passkey(server, authenticator, passkey, counter=5)
    assert status == 200, answer
    refused(sign_in_with_passkey(server, authenticator, passkey, counter=3), 401, "credential_clone_suspected")
    # Blocked: even a counter past the last one seen is refused now.
    refused(sign_in_with_passkey(server, authenticator, passkey, counter=6), 401, "credential_clone_suspected")
    (item,) = listed(server, session["accessToken"])
    assert item["id"] == passkey.id and item["cloneSuspected"] is True, item


def test_a_sign_up_challenge_cannot_sign_in(open_server: Server) -> None:
    authenticator = SoftwareAuthenticator(open_server.origin)
    passkey, _, _ = sign_up(open_server, authenticator)
    status, sign_up_options = call(f"{open_server.url}/v1/auth/passkey/signup/options", {})
    assert status == 200, sign_up_options
    assertion = authenticator.get({"challenge": sign_up_options["challenge"]}, passkey)
    refused(call(f"{open_server.url}/v1/auth/passkey", {"challengeId": sign_up_options["challengeId"], "credential": assertion}), 401, "invalid_credential")


def test_a_sign_in_challenge_cannot_sign_up(open_server: Server) -> None:
    authenticator = SoftwareAuthenticator(open_server.origin)
    options = sign_in_options(open_server)
    # The creation options a client would have needed, with the sign-in challenge in them.
    forged = {"rp": {"id": RP_ID}, "user": {"id": websafe_encode(secrets.token_bytes(16))}, "challenge": options["challenge"],
              "pubKeyCredParams": [{"type": "public-key", "alg": -7}]}
    _, registration = authenticator.create(forged)
    answer = call(f"{open_server.url}/v1/auth/passkey/signup", {"challengeId": options["challengeId"], "credential": registration})
    refused(answer, 401, "invalid_credential")


def test_a_deleted_passkey_no_longer_signs_in(server: Server) -> None:
    session = sign_in_with_apple(server)
    authenticator = SoftwareAuthenticator(server.origin)
    passkey, _, _ = add_passkey(server, authenticator, session["accessToken"])
    status, answer = sign_in_with_passkey(server, authenticator, passkey)
    assert status == 200, answer
    status, deleted = call(f"{server.url}/v1/me/passkeys/{passkey.id}", bearer=session["accessToken"], method="DELETE")
    assert status == 204, deleted
    assert listed(server, session["accessToken"]) == []
    refused(sign_in_with_passkey(server, authenticator, passkey), 401, "invalid_credential")
    # The Apple identity is still there.
    status, me = call(f"{server.url}/v1/me", bearer=session["accessToken"], method="GET")
    assert status == 200 and [item["provider"] for item in me["identities"]] == ["apple"], me


def test_a_credential_registered_twice_is_refused(server: Server) -> None:
    first = sign_in_with_apple(server)
    authenticator = SoftwareAuthenticator(server.origin)
    passkey, _, _ = add_passkey(server, authenticator, first["accessToken"])
    # The same credential again, for the same user (a client ignoring excludeCredentials) and for another user.
    for session in (first, sign_in_with_apple(server)):
        status, options = call(f"{server.url}/v1/me/passkeys/options", bearer=session["accessToken"], empty=True)
        assert status == 200, options
        _, registration = authenticator.create(options, credential=passkey)
        refused(call(f"{server.url}/v1/me/passkeys", {"credential": registration}, bearer=session["accessToken"]), 409, "identity_in_use")
    assert [item["id"] for item in listed(server, first["accessToken"])] == [passkey.id]


def test_the_last_identity_cannot_be_deleted(open_server: Server) -> None:
    authenticator = SoftwareAuthenticator(open_server.origin)
    passkey, _, session = sign_up(open_server, authenticator)
    refused(call(f"{open_server.url}/v1/me/passkeys/{passkey.id}", bearer=session["accessToken"], method="DELETE"), 409, "last_identity")
    assert [item["id"] for item in listed(open_server, session["accessToken"])] == [passkey.id]
    status, answer = sign_in_with_passkey(open_server, authenticator, passkey)
    assert status == 200 and answer["user"]["id"] == session["user"]["id"], answer


def test_passkey_sign_up_is_closed_by_default(server: Server) -> None:
    refused(call(f"{server.url}/v1/auth/passkey/signup/options", {}), 403, "signup_closed")
    refused(call(f"{server.url}/v1/auth/passkey/signup/options", {"displayName": "Jane"}), 403, "signup_closed")


# MARK: - Signing up with a passkey


def test_a_passkey_signs_up_a_new_account_and_then_signs_in(open_server: Server) -> None:
    authenticator = SoftwareAuthenticator(open_server.origin)
    status, options = call(f"{open_server.url}/v1/auth/passkey/signup/options", {"displayName": "Jane Passkey"})
    assert status == 200, options
    assert options["challengeId"] and options["rp"]["id"] == RP_ID and options["user"]["id"], options
    assert options["user"]["displayName"] == "Jane Passkey" and options["excludeCredentials"] == [], options
    assert options["authenticatorSelection"]["residentKey"] == "required" and options["attestation"] == "none", options
    passkey, registration = authenticator.create(options)
    status, answer = call(f"{open_server.url}/v1/auth/passkey/signup", {"challengeId": options["challengeId"], "credential": registration, "name": "My phone"})
    assert status == 200, answer
    assert answer["isNewUser"] is True and answer["accessToken"] and answer["refreshToken"], answer
    user_id = answer["user"]["id"]
    token = claims(answer["accessToken"])
    assert token["idp"] == "passkey" and token["sub"] == user_id, token
    assert [(item["provider"], item["subject"]) for item in answer["user"]["identities"]] == [("passkey", passkey.id)], answer

    (item,) = listed(open_server, answer["accessToken"])
    assert item["id"] == passkey.id and item["name"] == "My phone" and item["backedUp"] is True, item

    # The same sign-up challenge cannot make a second account.
    refused(call(f"{open_server.url}/v1/auth/passkey/signup", {"challengeId": options["challengeId"], "credential": registration}), 400, "challenge_expired")

    status, signed_in = sign_in_with_passkey(open_server, authenticator, passkey)
    assert status == 200, signed_in
    assert signed_in["isNewUser"] is False and signed_in["user"]["id"] == user_id, signed_in
    assert claims(signed_in["accessToken"])["idp"] == "passkey"
    status, me = call(f"{open_server.url}/v1/me", bearer=signed_in["accessToken"], method="GET")
    assert status == 200 and me["id"] == user_id and [item["provider"] for item in me["identities"]] == ["passkey"], me
