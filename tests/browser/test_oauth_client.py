"""Latchkey as an OAuth 2.1 authorization server, driven by a standard client library and plain HTTP.

The client is authlib's `OAuth2Session`, used unmodified as a public client (`token_endpoint_auth_method
="none"`, PKCE S256) against the endpoints published in `/.well-known/oauth-authorization-server`. The
user's part (the emulator's consent page) is played with `requests`, without a browser. The negative
tests are plain `requests` calls. Nothing here uses Latchkey code; the server is a subprocess:
    LATCHKEY_BIN=/path/to/latchkey python3 -m pytest -q tests/browser
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
import uuid
from html.parser import HTMLParser
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

import pytest
from conftest import Server, free_port
import requests
from authlib.integrations.base_client import OAuthError
from authlib.integrations.requests_client import OAuth2Session

HTTP_TIMEOUT = 15.0
CLIENT_ID = "com.example.app"


def _session() -> requests.Session:
    session = requests.Session()
    session.trust_env = False  # loopback only: never route through a proxy from the environment
    return session


@pytest.fixture
def http():
    """A plain HTTP session that never follows redirects on its own (see `get`/`post` below)."""
    with _session() as session:
        yield session


@pytest.fixture(scope="module")
def metadata(server):
    with _session() as session:
        response = session.get(server.url("/.well-known/oauth-authorization-server"), timeout=HTTP_TIMEOUT)
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("application/json")
    return response.json()


@pytest.fixture
def redirect_uri():
    """An RFC 8252 loopback redirect URI on an arbitrary port (nothing listens there)."""
    return f"http://127.0.0.1:{free_port()}/callback"


def get(session: requests.Session, url: str, **kwargs) -> requests.Response:
    return session.get(url, timeout=HTTP_TIMEOUT, allow_redirects=False, **kwargs)


def post(session: requests.Session, url: str, **kwargs) -> requests.Response:
    return session.post(url, timeout=HTTP_TIMEOUT, allow_redirects=False, **kwargs)


# --------------------------------------------------------------------------------------------
# Playing the user: the emulator's consent form, without a browser
# --------------------------------------------------------------------------------------------


class FormParser(HTMLParser):
    """Collects every <form> with its action, method and <input>/<button> fields."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict] = []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "form":
            self.forms.append(
                {"action": attributes.get("action", ""), "method": (attributes.get("method") or "get").lower(),
                 "inputs": [], "buttons": []}
            )
        elif tag == "input" and self.forms:
            self.forms[-1]["inputs"].append(attributes)
        elif tag == "button" and self.forms:
            self.forms[-1]["buttons"].append(attributes)


def only_form(html: str) -> dict:
    parser = FormParser()
    parser.feed(html)
    assert len(parser.forms) == 1, f"expected one form, found {len(parser.forms)}:\n{html}"
    return parser.forms[0]


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def query_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query, keep_blank_values=True).items()}


def act_as_user(session: requests.Session, server: Server, authorize_url: str, *, action: str = "continue",
                email: str | None = None, given_name: str = "Test", family_name: str = "User",
                relayed: dict | None = None) -> str:
    """Follows an authorization URL through the emulator's consent page back to the server's callback.

    Returns the Location of the server's final redirect to the app (which nothing serves; not followed).
    """
    start = get(session, authorize_url)
    assert start.status_code == 303, f"{start.status_code} {start.text[:500]}"
    consent_url = start.headers["Location"]
    assert consent_url.startswith(server.emulator_url + "/"), consent_url

    page = get(session, consent_url)
    assert page.status_code == 200, page.text[:500]
    form = only_form(page.text)
    assert form["method"] == "post"
    values = {(b.get("name"), b.get("value")) for b in form["buttons"]}
    assert ("action", "continue") in values and ("action", "cancel") in values, form["buttons"]

    fields = {i["name"]: i.get("value", "") for i in form["inputs"] if i.get("type") == "hidden" and i.get("name")}
    fields.update(action=action, email=email or f"user-{uuid.uuid4().hex[:12]}@example.com",
                  given_name=given_name, family_name=family_name)
    answer = post(session, urljoin(consent_url, form["action"]), data=fields)

    apple = urlsplit(consent_url).path == "/auth/authorize"
    if apple:  # Apple's web flow asks for response_mode=form_post: no redirect, a page that POSTs
        assert query_of(consent_url).get("response_mode") == "form_post", consent_url
        assert answer.status_code == 200, f"{answer.status_code} {answer.headers}"
    if answer.status_code in (301, 302, 303, 307):  # query-mode providers (Google, Microsoft, …)
        callback = answer.headers["Location"]
        assert callback.startswith(server.url("/oauth2/callback/")), callback
        back = get(session, callback)
    else:  # Apple's form_post: an auto-submitting form carrying code, id_token, state (and user)
        assert answer.status_code == 200, f"{answer.status_code} {answer.text[:500]}"
        relay = only_form(answer.text)
        assert relay["method"] == "post"
        assert relay["action"].startswith(server.url("/oauth2/callback/")), relay["action"]
        relay_fields = {i["name"]: i.get("value", "") for i in relay["inputs"] if i.get("name")}
        if relayed is not None:
            relayed.update(relay_fields)
        back = post(session, relay["action"], data=relay_fields)

    assert back.status_code == 303, f"{back.status_code} {back.text[:500]}"
    return back.headers["Location"]


def authorize_url(server: Server, redirect_uri: str, **overrides) -> tuple[str, str, str]:
    """A hand-built authorization URL (for the negative tests); returns (url, verifier, state)."""
    verifier, challenge = pkce_pair()
    state = secrets.token_urlsafe(16)
    params = {
        "response_type": "code",
        "client_id": CLIENT_ID,
        "redirect_uri": redirect_uri,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": state,
        "provider": "google",
    }
    params.update(overrides)
    params = {k: v for k, v in params.items() if v is not None}
    return server.url("/oauth2/authorize?" + urlencode(params)), verifier, state


def sign_in_for_code(http, server, redirect_uri, **overrides) -> tuple[str, str, dict]:
    """A full sign-in with plain requests; returns (code, verifier, redirect query)."""
    url, verifier, state = authorize_url(server, redirect_uri, **overrides)
    location = act_as_user(http, server, url)
    assert location.startswith(redirect_uri + "?"), location
    answer = query_of(location)
    assert answer.get("state") == state, answer
    assert "code" in answer, answer
    return answer["code"], verifier, answer


def redeem(http, server, code, verifier, redirect_uri, client_id=CLIENT_ID) -> requests.Response:
    return post(http, server.url("/oauth2/token"), data={
        "grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
        "code_verifier": verifier, "client_id": client_id,
    })


def assert_html_error_page(response: requests.Response, status: int = 400) -> None:
    assert response.status_code == status, f"{response.status_code} {response.headers} {response.text[:500]}"
    assert response.headers.get("Content-Type", "").startswith("text/html"), response.headers
    assert "Location" not in response.headers, response.headers["Location"]
    assert_page_headers(response)


def assert_page_headers(response: requests.Response) -> None:
    assert response.headers.get("X-Frame-Options") == "DENY", response.headers
    csp = response.headers.get("Content-Security-Policy", "")
    assert "frame-ancestors 'none'" in csp, csp


def assert_oauth_error(response: requests.Response, status: int, error: str) -> dict:
    assert response.status_code == status, f"{response.status_code} {response.text}"
    assert response.headers.get("Content-Type", "").startswith("application/json"), response.headers
    assert "no-store" in response.headers.get("Cache-Control", ""), response.headers
    body = response.json()
    assert body.get("error") == error, body
    return body


# --------------------------------------------------------------------------------------------
# The happy path with authlib
# --------------------------------------------------------------------------------------------


def test_metadata(metadata, server):
    assert metadata["issuer"] == server.base_url
    for key in ("authorization_endpoint", "token_endpoint", "revocation_endpoint"):
        assert metadata[key].startswith(server.base_url + "/"), metadata[key]
    assert metadata["code_challenge_methods_supported"] == ["S256"]
    assert "code" in metadata["response_types_supported"]
    assert {"authorization_code", "refresh_token"} <= set(metadata["grant_types_supported"])
    assert "none" in metadata["token_endpoint_auth_methods_supported"]
    assert metadata.get("authorization_response_iss_parameter_supported") is True


@pytest.mark.parametrize("provider", ["google", "apple", "microsoft", "oidc", "dropbox"])
def test_authlib_public_client_full_cycle(server, metadata, http, redirect_uri, provider):
    client = OAuth2Session(
        client_id=CLIENT_ID,
        redirect_uri=redirect_uri,
        code_challenge_method="S256",
        token_endpoint_auth_method="none",
    )
    client.trust_env = False
    code_verifier = secrets.token_urlsafe(48)
    url, state = client.create_authorization_url(
        metadata["authorization_endpoint"], code_verifier=code_verifier, provider=provider
    )
    assert query_of(url)["code_challenge_method"] == "S256"

    email = f"authlib-{provider}-{uuid.uuid4().hex[:10]}@example.com"
    location = act_as_user(http, server, url, email=email, given_name="Katherine", family_name="Johnson")
    assert location.startswith(redirect_uri + "?"), location
    answer = query_of(location)
    assert answer["state"] == state
    assert answer["iss"] == metadata["issuer"], answer  # RFC 9207
    assert "error" not in answer, answer

    token = client.fetch_token(
        metadata["token_endpoint"], authorization_response=location, code_verifier=code_verifier
    )  # authlib raises MismatchingStateException if `state` does not match
    assert token["token_type"] == "Bearer"
    assert token["expires_in"] > 0
    first_refresh = token["refresh_token"]
    assert first_refresh.startswith("lkr_"), first_refresh

    me = client.get(server.url("/v1/me"), timeout=HTTP_TIMEOUT)  # authlib adds the Bearer header
    assert me.status_code == 200, me.text
    user = me.json()
    assert user["identities"][0]["provider"] == provider, user
    assert user["identities"][0]["subject"]
    assert user["email"] == email, user
    assert user["givenName"] == "Katherine", user
    assert user["familyName"] == "Johnson", user

    refreshed = client.refresh_token(metadata["token_endpoint"])
    assert refreshed["token_type"] == "Bearer"
    assert refreshed["refresh_token"].startswith("lkr_")
    assert refreshed["refresh_token"] != first_refresh
    assert refreshed["access_token"] != token["access_token"]
    me_again = client.get(server.url("/v1/me"), timeout=HTTP_TIMEOUT)
    assert me_again.status_code == 200, me_again.text
    assert me_again.json()["id"] == user["id"]

    current_refresh = refreshed["refresh_token"]
    revoked = client.revoke_token(metadata["revocation_endpoint"], token=current_refresh,
                                  token_type_hint="refresh_token")
    assert revoked.status_code == 200, revoked.text

    with pytest.raises(OAuthError) as refused:
        client.refresh_token(metadata["token_endpoint"], refresh_token=current_refresh)
    assert refused.value.error == "invalid_grant", refused.value


def test_apple_name_is_kept_when_apple_stops_sending_it(server, http, redirect_uri):
    """Apple's form_post carries `user` (the name) on the first authorization only."""
    email = f"apple-twice-{uuid.uuid4().hex[:10]}@example.com"
    users = []
    for given, family in (("Ada", "Lovelace"), ("Someone", "Else")):
        url, verifier, state = authorize_url(server, redirect_uri, provider="apple")
        relayed: dict = {}
        location = act_as_user(http, server, url, email=email, given_name=given, family_name=family, relayed=relayed)
        answer = query_of(location)
        assert answer.get("state") == state and "code" in answer, answer
        tokens = redeem(http, server, answer["code"], verifier, redirect_uri)
        assert tokens.status_code == 200, tokens.text
        me = get(http, server.url("/v1/me"), headers={"Authorization": "Bearer " + tokens.json()["access_token"]})
        assert me.status_code == 200, me.text
        users.append((relayed, me.json()))

    (first_relay, first), (second_relay, second) = users
    assert "user" in first_relay and "user" not in second_relay, (first_relay.keys(), second_relay.keys())
    assert second["id"] == first["id"]
    assert (second["givenName"], second["familyName"]) == ("Ada", "Lovelace"), second


def test_refresh_token_rotation_and_reuse_detection(server, http, redirect_uri):
    """SECURITY.md: a retried refresh gets the same successor while that successor is unused;
    replaying a token whose successor was used revokes the whole session."""
    code, verifier, _ = sign_in_for_code(http, server, redirect_uri)
    tokens = redeem(http, server, code, verifier, redirect_uri)
    assert tokens.status_code == 200, tokens.text

    def refresh(token: str) -> requests.Response:
        return post(http, server.url("/oauth2/token"),
                    data={"grant_type": "refresh_token", "refresh_token": token, "client_id": CLIENT_ID})

    original = tokens.json()["refresh_token"]
    first = refresh(original)
    assert first.status_code == 200, first.text
    successor = first.json()["refresh_token"]
    assert successor != original

    retried = refresh(original)  # a retried request: same successor, nothing revoked
    assert retried.status_code == 200, retried.text
    assert retried.json()["refresh_token"] == successor

    used = refresh(successor)  # the app moves on
    assert used.status_code == 200, used.text
    newest = used.json()

    assert_oauth_error(refresh(original), 400, "invalid_grant")  # reuse: its successor was already used
    assert_oauth_error(refresh(newest["refresh_token"]), 400, "invalid_grant")  # the family is revoked
    me = get(http, server.url("/v1/me"), headers={"Authorization": "Bearer " + newest["access_token"]})
    assert me.status_code == 401, f"{me.status_code} {me.text}"


# --------------------------------------------------------------------------------------------
# Authorization endpoint: errors
# --------------------------------------------------------------------------------------------


def test_missing_code_challenge_redirects_invalid_request(server, http, redirect_uri):
    url, _, state = authorize_url(server, redirect_uri, code_challenge=None, code_challenge_method=None)
    response = get(http, url)
    assert response.status_code in (302, 303), f"{response.status_code} {response.text[:300]}"
    location = response.headers["Location"]
    assert location.startswith(redirect_uri + "?"), location
    answer = query_of(location)
    assert answer["error"] == "invalid_request", answer
    assert answer["state"] == state, answer
    assert answer["iss"] == server.base_url, answer
    assert "code" not in answer


def test_plain_code_challenge_method_redirects_invalid_request(server, http, redirect_uri):
    verifier = secrets.token_urlsafe(48)
    url, _, state = authorize_url(server, redirect_uri, code_challenge=verifier, code_challenge_method="plain")
    response = get(http, url)
    assert response.status_code in (302, 303), f"{response.status_code} {response.text[:300]}"
    location = response.headers["Location"]
    assert location.startswith(redirect_uri + "?"), location
    answer = query_of(location)
    assert answer["error"] == "invalid_request", answer
    assert answer["state"] == state, answer


@pytest.mark.parametrize("bad_redirect", [
    "https://evil.example/cb",
    "http://127.0.0.1/elsewhere",
    "http://localhost.evil.example/callback",
    "com.example.app:/other",
])
def test_unregistered_redirect_uri_is_an_error_page_not_a_redirect(server, http, bad_redirect):
    url, _, _ = authorize_url(server, bad_redirect)
    assert_html_error_page(get(http, url))


def test_unknown_client_is_an_error_page(server, http, redirect_uri):
    url, _, _ = authorize_url(server, redirect_uri, client_id="com.example.unknown")
    assert_html_error_page(get(http, url))


def test_chooser_page_without_provider(server, http, redirect_uri):
    url, _, _ = authorize_url(server, redirect_uri, provider=None)
    response = get(http, url)
    assert response.status_code == 200, response.text[:300]
    assert response.headers["Content-Type"].startswith("text/html")
    assert_page_headers(response)
    links = re.findall(r'href="([^"]+)"', response.text)
    providers = {query_of(link.replace("&amp;", "&")).get("provider") for link in links}
    assert {"apple", "google", "microsoft", "oidc", "dropbox"} <= providers, links


def test_state_mismatch_at_callback_is_an_error_page(server, http):
    response = get(http, server.url("/oauth2/callback/google?state=bogus&code=x"))
    assert_html_error_page(response)


def test_cancel_at_provider_redirects_access_denied_with_app_state(server, http, redirect_uri):
    url, _, state = authorize_url(server, redirect_uri)
    location = act_as_user(http, server, url, action="cancel")
    assert location.startswith(redirect_uri + "?"), location
    answer = query_of(location)
    assert answer["error"] == "access_denied", answer
    assert answer["state"] == state, answer
    assert answer["iss"] == server.base_url, answer
    assert "code" not in answer


# --------------------------------------------------------------------------------------------
# Token endpoint: errors
# --------------------------------------------------------------------------------------------


def test_wrong_code_verifier_is_invalid_grant(server, http, redirect_uri):
    code, _, _ = sign_in_for_code(http, server, redirect_uri)
    wrong, _ = pkce_pair()
    assert_oauth_error(redeem(http, server, code, wrong, redirect_uri), 400, "invalid_grant")


def test_code_replay_is_invalid_grant_and_revokes_the_session(server, http, redirect_uri):
    code, verifier, _ = sign_in_for_code(http, server, redirect_uri)
    first = redeem(http, server, code, verifier, redirect_uri)
    assert first.status_code == 200, first.text
    tokens = first.json()
    me = get(http, server.url("/v1/me"), headers={"Authorization": "Bearer " + tokens["access_token"]})
    assert me.status_code == 200, me.text

    assert_oauth_error(redeem(http, server, code, verifier, redirect_uri), 400, "invalid_grant")

    refused = get(http, server.url("/v1/me"), headers={"Authorization": "Bearer " + tokens["access_token"]})
    assert refused.status_code == 401, f"{refused.status_code} {refused.text}"
    refresh = post(http, server.url("/oauth2/token"), data={
        "grant_type": "refresh_token", "refresh_token": tokens["refresh_token"], "client_id": CLIENT_ID})
    assert_oauth_error(refresh, 400, "invalid_grant")


def test_unknown_client_at_token_endpoint_is_invalid_client(server, http, redirect_uri):
    code, verifier, _ = sign_in_for_code(http, server, redirect_uri)
    response = redeem(http, server, code, verifier, redirect_uri, client_id="com.example.unknown")
    assert_oauth_error(response, 401, "invalid_client")


def test_token_responses_are_not_cached(server, http, redirect_uri):
    code, verifier, _ = sign_in_for_code(http, server, redirect_uri)
    ok = redeem(http, server, code, verifier, redirect_uri)
    assert ok.status_code == 200, ok.text
    assert "no-store" in ok.headers.get("Cache-Control", ""), ok.headers
    bad = post(http, server.url("/oauth2/token"), data={"grant_type": "authorization_code", "client_id": CLIENT_ID})
    assert bad.status_code == 400, bad.text
    assert "no-store" in bad.headers.get("Cache-Control", ""), bad.headers


# --------------------------------------------------------------------------------------------
# Page headers
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/callback"])
def test_pages_cannot_be_framed(server, http, path):
    response = get(http, server.url(path))
    assert response.status_code == 200, response.text[:300]
    assert response.headers["Content-Type"].startswith("text/html")
    assert_page_headers(response)
