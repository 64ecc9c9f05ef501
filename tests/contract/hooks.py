"""Schemathesis hooks for Latchkey's contract run (loaded by run.sh through SCHEMATHESIS_HOOKS).

Real sessions come from the dev server's Apple emulator, never from a fixed token:
- bearer operations get the access token of a fresh sign-in (a new emulator user, a fresh nonce, an identity
  token used once); schemathesis signs in again whenever an answer is 401, e.g. after logout or DELETE /v1/me;
- every other positive generated call to POST /v1/auth/apple, POST /v1/token and DELETE /v1/me/sessions/{id} carries a
  real identity token, refresh token or session id instead of a generated one, so the success answers are
  checked against the document too, not only the refusals.

The admin API (/admin/) gets the real admin key run.sh made with `latchkey admin-keys create` (read-write); every
other positive call to POST /admin/session sends it in the body, and every other one to GET /admin/session carries the
console's cookie of a session signed in with it. Every
other positive generated call to an admin operation on one user, session, invite or delivery names a real one instead
of a generated id: a user or session this module makes for that call alone (so deleting the user, ending its sessions
or replacing its claims touches no session another operation is using), an invite it makes, a pending delivery.
"""

import base64
import hashlib
import json
import os
import secrets
import threading
import urllib.error
import urllib.request

import schemathesis

SERVER = os.environ["LATCHKEY_CONTRACT_SERVER"]
EMULATOR = os.environ["LATCHKEY_CONTRACT_EMULATOR"]
ADMIN_KEY = os.environ["LATCHKEY_CONTRACT_ADMIN_KEY"]
CLIENT_ID = "com.example.app"

_lock = threading.Lock()
_calls: dict[str, int] = {}
# The emulator user behind each access token this module handed out.
_subjects: dict[str, str] = {}


def _send(method: str, url: str, body: dict | None = None, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def _post(url: str, body: dict) -> tuple[int, dict]:
    return _send("POST", url, body)


def admin(method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    """Calls the admin API with the run's admin key."""
    return _send(method, f"{SERVER}{path}", body, {"Authorization": f"Bearer {ADMIN_KEY}"})


def apple_sign_in(sub: str | None = None) -> tuple[str, dict]:
    """A user at the emulator (new unless `sub` is given) and a native sign-in's body for POST /v1/auth/apple."""
    if sub is None:
        status, user = _post(f"{EMULATOR}/emulator/users", {})
        assert status == 201, f"POST /emulator/users answered {status}: {user}"
        sub = user["sub"]
    raw_nonce = secrets.token_urlsafe(24)
    nonce = hashlib.sha256(raw_nonce.encode()).hexdigest()
    status, authorization = _post(f"{EMULATOR}/emulator/authorizations", {"sub": sub, "clientId": CLIENT_ID, "nonce": nonce})
    assert status == 201, f"POST /emulator/authorizations answered {status}: {authorization}"
    body = {"identityToken": authorization["identityToken"], "rawNonce": raw_nonce, "authorizationCode": authorization["authorizationCode"]}
    return sub, body


def new_session(sub: str | None = None) -> dict:
    """Signs in (a new user unless `sub` is given); returns the sign-in answer."""
    sub, body = apple_sign_in(sub)
    status, answer = _post(f"{SERVER}/v1/auth/apple", body)
    assert status == 200, f"POST /v1/auth/apple answered {status}: {answer}"
    with _lock:
        _subjects[answer["accessToken"]] = sub
    return answer


def claim(token: str, name: str):
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))[name]


def _positive(case) -> bool:
    """Whether schemathesis meant the case to fit the document (negative cases stay as generated)."""
    meta = case.meta
    return meta is None or meta.generation.mode.is_positive


def _every_other(label: str) -> bool:
    with _lock:
        _calls[label] = _calls.get(label, 0) + 1
        return _calls[label] % 2 == 0


@schemathesis.auth(refresh_interval=120).apply_to(path_regex="^/v1/(me|logout)")
class LatchkeySession:
    def get(self, case, context):
        return new_session()["accessToken"]

    def set(self, case, data, context):
        case.headers = case.headers or {}
        case.headers["Authorization"] = f"Bearer {data}"


@schemathesis.auth().apply_to(path_regex="^/admin/")
class LatchkeyAdminKey:
    def get(self, case, context):
        return ADMIN_KEY

    def set(self, case, data, context):
        case.headers = case.headers or {}
        case.headers["Authorization"] = f"Bearer {data}"


# Admin operations on one user: each positive call of every other pair names a user made for it alone.
ADMIN_USER_OPERATIONS = {
    "GET /admin/v1/users/{id}",
    "DELETE /admin/v1/users/{id}",
    "PUT /admin/v1/users/{id}/claims",
    "DELETE /admin/v1/users/{id}/sessions",
}


def _with_id(case, value: str) -> None:
    case.path_parameters = {**(case.path_parameters or {}), "id": value}


def console_cookie() -> str:
    """A console session signed in with the run's admin key: the value of its cookie."""
    request = urllib.request.Request(
        f"{SERVER}/admin/session", data=json.dumps({"key": ADMIN_KEY}).encode(), headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        cookie = response.headers["Set-Cookie"]
    assert cookie and cookie.startswith("latchkey_admin="), cookie
    return cookie.split(";", 1)[0].split("=", 1)[1]


def pending_delivery() -> str | None:
    """A real webhook delivery: a failed one if there is one (only those are retried; the endpoint run.sh configured
    never answers, so within a run they stay pending, and retrying one is a documented 404)."""
    for status in ("failed", "pending"):
        code, listed = admin("GET", f"/admin/v1/webhooks/deliveries?status={status}&limit=1")
        assert code == 200, f"GET /admin/v1/webhooks/deliveries answered {code}: {listed}"
        if listed["deliveries"]:
            return listed["deliveries"][0]["id"]
    return None


@schemathesis.hook
def before_call(context, case, kwargs):
    operation = f"{case.operation.method.upper()} {case.operation.path}"
    if not _positive(case):
        return
    if operation == "POST /v1/auth/apple":
        if isinstance(case.body, dict) and _every_other(operation):
            _, body = apple_sign_in()
            # A generated redirectUri is not one of the server's apple.redirectUris (400 invalid_request, as documented).
            case.body = {key: value for key, value in {**case.body, **body}.items() if key != "redirectUri"}
    elif operation == "POST /v1/token":
        if isinstance(case.body, dict) and _every_other(operation):
            refresh_token = new_session()["refreshToken"]
            if "refresh_token" in case.body or "refreshToken" not in case.body:
                case.body = {**case.body, "grant_type": "refresh_token", "refresh_token": refresh_token}
            else:
                case.body = {**case.body, "grantType": "refresh_token", "refreshToken": refresh_token}
    elif operation == "DELETE /v1/me/sessions/{id}":
        authorization = (case.headers or {}).get("Authorization", "")
        with _lock:
            sub = _subjects.get(authorization.removeprefix("Bearer "))
        if sub is not None and _every_other(operation):
            # Another session of the same user: ending it leaves the caller's own session alive.
            other = new_session(sub)
            case.path_parameters = {**(case.path_parameters or {}), "id": claim(other["accessToken"], "sid")}
    elif operation in ADMIN_USER_OPERATIONS:
        if _every_other(operation):
            _with_id(case, new_session()["user"]["id"])
    elif operation == "DELETE /admin/v1/sessions/{id}":
        if _every_other(operation):
            _with_id(case, claim(new_session()["accessToken"], "sid"))
    elif operation == "DELETE /admin/v1/invites/{id}":
        if _every_other(operation):
            status, invite = admin("POST", "/admin/v1/invites", {"note": "contract run"})
            assert status == 201, f"POST /admin/v1/invites answered {status}: {invite}"
            _with_id(case, invite["id"])
    elif operation in ("POST /admin/v1/webhooks/deliveries/{id}/retry", "GET /admin/v1/webhooks/deliveries/{id}"):
        if _every_other(operation):
            delivery = pending_delivery()
            if delivery is not None:
                _with_id(case, delivery)
    elif operation == "POST /admin/session":
        # The real admin key in the JSON or the form, so the answers that set the console's cookie are checked too.
        if isinstance(case.body, dict) and _every_other(operation):
            case.body = {**case.body, "key": ADMIN_KEY}
    elif operation == "GET /admin/session":
        if _every_other(operation):
            case.cookies = {**(case.cookies or {}), "latchkey_admin": console_cookie()}
