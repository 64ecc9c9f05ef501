"""The admin console (`GET /admin/`) of a real `latchkey serve --dev`, in headless Chromium (Selenium).

One server for the module, with a webhook endpoint nothing listens on (every delivery fails), two admin keys made with
`latchkey admin-keys create --dev` (read-write and read-only), and users signed in through the dev server's Apple
emulator, one of them with a passkey made by Chromium's virtual authenticator. The tests run in order in one browser,
as an operator would: sign in, search users, one user (a session revoked, claims refused then accepted, disable and
enable), a deletion behind its typed confirmation, webhook deliveries (one retried), the audit log, signing keys
(rotated), set-up findings, keyboard use, a read-only key, sign-out. Every page is checked for labels, headings and
Content-Security-Policy violations, and saved as a PNG in LATCHKEY_CONSOLE_SCREENSHOTS (default: a temporary folder,
named at the end of the run).

    LATCHKEY_BIN=/path/to/latchkey python3 -m pytest -q tests/console
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.common.virtual_authenticator import VirtualAuthenticatorOptions
from selenium.webdriver.support.ui import WebDriverWait

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from latchkey_process import binary, call, serve  # noqa: E402

CLIENT_ID = "com.example.app"
WAIT = 20.0
PAGE_SIZE = 20  # the users page lists this many at a time


# --------------------------------------------------------------------------------------------
# The server and its data
# --------------------------------------------------------------------------------------------


@dataclass
class World:
    url: str
    emulator: str
    port: int
    folder: str
    environment: dict
    admin_key: str
    reader_key: str
    webhook_secret: str
    users: dict = field(default_factory=dict)  # tag -> {"id", "sub", "email", "sessions": [session ids]}


def admin(world: World, method: str, path: str, body: dict | None = None, key: str | None = None) -> tuple[int, dict]:
    """The admin API with an admin key, as a backend calls it."""
    return call(world.url + path, body, bearer=key or world.admin_key, method=method)


def create_admin_key(served, name: str, read_only: bool = False) -> str:
    arguments = [binary(), "admin-keys", "create", "--dev", "--name", name] + (["--read-only"] if read_only else [])
    result = subprocess.run(arguments, cwd=served.folder, env=served.environment, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr + result.stdout
    key = result.stdout.strip()
    assert key.startswith("lka_") and len(key) == 47, key
    return key


def native_sign_in(world: World, sub: str, given: str, family: str) -> dict:
    """A native Sign in with Apple of the emulator user `sub`: a new session."""
    raw_nonce = secrets.token_urlsafe(24)
    status, authorization = call(
        f"{world.emulator}/emulator/authorizations", {"sub": sub, "clientId": CLIENT_ID, "nonce": hashlib.sha256(raw_nonce.encode()).hexdigest()})
    assert status == 201, authorization
    status, answer = call(f"{world.url}/v1/auth/apple", {
        "identityToken": authorization["identityToken"], "rawNonce": raw_nonce, "authorizationCode": authorization["authorizationCode"],
        "fullName": {"givenName": given, "familyName": family}})
    assert status == 200, answer
    return answer


def session_id(answer: dict) -> str:
    payload = answer["accessToken"].split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["sid"]


def new_user(world: World, tag: str, given: str, family: str, sessions: int = 1) -> dict:
    email = f"{tag}-{uuid.uuid4().hex[:8]}@example.com"
    status, made = call(f"{world.emulator}/emulator/users", {"email": email, "givenName": given, "familyName": family})
    assert status == 201, made
    answers = [native_sign_in(world, made["sub"], given, family) for _ in range(sessions)]
    user = {"id": answers[0]["user"]["id"], "sub": made["sub"], "email": email, "sessions": [session_id(a) for a in answers],
            "tokens": answers[-1], "name": f"{given} {family}"}
    world.users[tag] = user
    return user


@pytest.fixture(scope="module")
def world():
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    # Port 1 on loopback: nothing listens, so every delivery attempt fails at once.
    settings = {
        "LATCHKEY_WEBHOOKS_0_URL": "http://127.0.0.1:1/hook", "LATCHKEY_WEBHOOKS_0_SECRET": secret,
        "LATCHKEY_RATE_LIMIT_PER_IP": "100000", "LATCHKEY_RATE_LIMIT_PER_SUBJECT": "1000",
    }
    with serve(settings, dev=True, prefix="latchkey-console-") as served:
        world = World(
            url=served.url, emulator=f"http://127.0.0.1:{served.emulator_port}", port=served.port, folder=served.folder,
            environment=served.environment, admin_key=create_admin_key(served, "ops"), reader_key=create_admin_key(served, "support", read_only=True),
            webhook_secret=secret)
        # More users than a page holds, so the users page has a next page.
        for index in range(PAGE_SIZE + 2):
            new_user(world, f"user{index:02d}", "User", f"Number {index}")
        new_user(world, "ada", "Ada", "Lovelace")
        new_user(world, "pat", "Pat", "Passkey", sessions=2)
        new_user(world, "gone", "Dee", "Leted")
        yield world


# --------------------------------------------------------------------------------------------
# The browser
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for the whole module: the tests follow one operator's visit."""
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--no-proxy-server", "--window-size=1280,900"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(WAIT * 2)
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver, predicate, what: str):
    try:
        return WebDriverWait(driver, WAIT).until(lambda d: predicate(d))
    except Exception:
        status = driver.find_elements(By.ID, "status")
        pytest.fail(f"waited {WAIT} s for {what}; url={driver.current_url} status={status[0].text if status else None!r}\n"
                    + driver.find_element(By.TAG_NAME, "body").text[:3000])


def page(driver, heading: str):
    """Waits for the console to show the page of the address bar, its h1 starting with `heading`."""
    def shown(d):
        return d.execute_script(
            "const h = document.querySelector('#view h1'); const v = document.getElementById('view');"
            "return Boolean(h && v.dataset.rendered === (location.hash || '#/users') && h.textContent.startsWith(arguments[0]));", heading)
    wait(driver, shown, f"the page {heading!r}")
    return driver.find_element(By.ID, "view")


def status_says(driver, text: str) -> str:
    return wait(driver, lambda d: text in d.find_element(By.ID, "status").text and d.find_element(By.ID, "status").text, f"the status {text!r}")


def go(driver, world: World, hash_: str, heading: str):
    driver.get(f"{world.url}/admin/{hash_}")
    return page(driver, heading)


def nav(driver, label: str, heading: str):
    driver.find_element(By.LINK_TEXT, label).click()
    return page(driver, heading)


def table(driver, caption: str) -> list[list[str]]:
    """The rows of the table with this caption, as text."""
    return driver.execute_script("""
        const table = [...document.querySelectorAll('#view table')].find((t) => t.caption && t.caption.textContent === arguments[0]);
        return table ? [...table.tBodies[0].rows].map((row) => [...row.cells].map((cell) => cell.textContent)) : null;
    """, caption)


def screenshot(driver, folder: Path, name: str) -> None:
    """The whole page, however long."""
    height = driver.execute_script("return Math.min(5000, Math.max(900, document.documentElement.scrollHeight))")
    driver.set_window_size(1280, height)
    driver.execute_script("window.scrollTo(0, 0)")
    try:
        assert driver.save_screenshot(str(folder / f"{name}.png"))
    finally:
        driver.set_window_size(1280, 900)


def fetch(driver, method: str, path: str, body: str | None = None) -> tuple[int, dict]:
    """A request from the console's page, as its script would send it (the cookie, and the browser's Origin)."""
    status, text = driver.execute_async_script("""
        const [method, path, body, done] = arguments;
        fetch(path, { method, credentials: 'same-origin', headers: body === null ? {} : { 'Content-Type': 'application/json' },
          body: body === null ? undefined : body })
          .then(async (r) => done([r.status, await r.text()]), (e) => done([0, String(e)]));
    """, method, path, body)
    try:
        return status, json.loads(text) if text else {}
    except ValueError:
        return status, {"text": text}


ACCESSIBILITY = """
    const problems = [];
    if (!document.documentElement.lang) { problems.push('no lang'); }
    const visible = (e) => e.offsetParent !== null || e === document.body;
    for (const e of document.querySelectorAll('input, textarea, select')) {
      if (!visible(e) || e.type === 'hidden') { continue; }
      const labelled = (e.id && document.querySelector('label[for="' + e.id + '"]')) || e.getAttribute('aria-label') || e.closest('label');
      if (!labelled) { problems.push('unlabelled ' + e.tagName + '#' + e.id); }
    }
    for (const e of document.querySelectorAll('button, a[href]')) {
      if (visible(e) && !(e.textContent.trim() || e.getAttribute('aria-label'))) { problems.push('nameless ' + e.tagName); }
    }
    for (const e of document.querySelectorAll('th')) { if (e.getAttribute('scope') !== 'col') { problems.push('th without scope'); } }
    for (const e of document.querySelectorAll('table')) { if (!e.caption) { problems.push('table without caption'); } }
    const headings = [...document.querySelectorAll('h1')].filter(visible);
    if (headings.length !== 1) { problems.push(headings.length + ' visible h1'); }
    for (const e of document.querySelectorAll('[id]')) {
      if (document.querySelectorAll('[id="' + e.id + '"]').length > 1) { problems.push('duplicate id ' + e.id); }
    }
    return problems;
"""


def check_page(driver) -> None:
    """Labels, names, headings and table markup as an accessibility check expects; no CSP violation, no script error."""
    problems = driver.execute_script(ACCESSIBILITY)
    assert problems == [], problems
    logs = driver.get_log("browser")
    refused = [entry["message"] for entry in logs if any(word in entry["message"] for word in ("Content Security Policy", "Refused to", "Uncaught"))]
    assert refused == [], refused


def sign_in(driver, world: World, key: str) -> None:
    """Pastes the key and presses Enter, as one would."""
    driver.get(f"{world.url}/admin/")
    wait(driver, lambda d: d.find_element(By.ID, "key").is_displayed(), "the sign-in form")
    box = driver.find_element(By.ID, "key")
    box.clear()
    box.send_keys(key + Keys.ENTER)
    page(driver, "Users")


# --------------------------------------------------------------------------------------------
# Tests, in the order an operator works
# --------------------------------------------------------------------------------------------


def test_sign_in(world, browser, screenshots):
    request = urllib.request.Request(f"{world.url}/admin/")
    with urllib.request.urlopen(request, timeout=30) as response:
        headers = response.headers
        body = response.read().decode()
    csp = headers["Content-Security-Policy"]
    for directive in ("default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'",
                      "form-action 'self'", "base-uri 'none'"):
        assert directive in csp, csp
    assert headers["X-Content-Type-Options"] == "nosniff" and headers["Cache-Control"] == "no-store"
    assert "<script>" not in body and 'src="/admin/console.js"' in body

    browser.get(f"{world.url}/admin/")
    wait(browser, lambda d: d.find_element(By.ID, "key").is_displayed(), "the sign-in form")
    assert browser.find_element(By.CSS_SELECTOR, 'label[for="key"]').text == "Admin key"
    assert not browser.find_element(By.ID, "nav").is_displayed()
    check_page(browser)
    screenshot(browser, screenshots, "01-sign-in")

    # A made-up key is refused, and says so.
    browser.find_element(By.ID, "key").send_keys("lka_" + "A" * 43 + Keys.ENTER)
    wait(browser, lambda d: "Sign-in refused" in d.find_element(By.ID, "signin-error").text, "the refusal")
    screenshot(browser, screenshots, "02-sign-in-refused")

    sign_in(browser, world, world.admin_key)
    assert "admin key ops" in browser.find_element(By.ID, "who").text
    cookie = next(c for c in browser.get_cookies() if c["name"] == "latchkey_admin")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/admin", cookie
    # Loopback http: a Secure cookie would be dropped; the value is a sealed session, not the key.
    assert not cookie["secure"] and world.admin_key not in cookie["value"] and cookie["value"].startswith("v1."), cookie

    # The cookie writes only from the console's origin: without Origin, or from another, a write is 403.
    for origin in (None, "https://evil.example"):
        headers = {"Cookie": f"latchkey_admin={cookie['value']}", "Content-Type": "application/json"}
        if origin:
            headers["Origin"] = origin
        request = urllib.request.Request(f"{world.url}/admin/v1/invites", data=b"{}", headers=headers, method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 403 and json.loads(refused.value.read())["error"] == "invalid_origin"
    check_page(browser)


def test_users_search_and_pages(world, browser, screenshots):
    view = nav(browser, "Users", "Users")
    first = table(browser, "Users")
    assert len(first) == PAGE_SIZE, first
    check_page(browser)
    screenshot(browser, screenshots, "03-users")
    browser.find_element(By.ID, "next-page").click()
    wait(browser, lambda d: (rows := table(d, "Users")) is not None and rows[0][0] not in {row[0] for row in first}, "the next page")
    second = table(browser, "Users")
    assert len(first) + len(second) == len(world.users), (len(first), len(second))
    assert browser.find_element(By.LINK_TEXT, "First page")

    # By e-mail.
    ada = world.users["ada"]
    browser.find_element(By.ID, "search-email").send_keys(ada["email"])
    browser.find_element(By.CSS_SELECTOR, "#user-search button[type=submit]").click()
    wait(browser, lambda d: (rows := table(d, "Users")) is not None and len(rows) == 1 and rows[0][0] == ada["id"], "the e-mail search")
    assert table(browser, "Users")[0][2] == "Ada Lovelace"
    screenshot(browser, screenshots, "04-users-search")

    # By provider and subject.
    pat = world.users["pat"]
    nav(browser, "Users", "Users")
    browser.find_element(By.ID, "search-provider").send_keys("apple")
    browser.find_element(By.ID, "search-subject").send_keys(pat["sub"] + Keys.ENTER)
    wait(browser, lambda d: (rows := table(d, "Users")) is not None and [row[0] for row in rows] == [pat["id"]], "the provider search")

    # By id: straight to the user.
    browser.find_element(By.ID, "search-id").send_keys(ada["id"] + Keys.ENTER)
    page(browser, "User Ada Lovelace")
    assert "#/users/" + ada["id"] in browser.current_url
    assert view is not None
    check_page(browser)


def add_passkey(world: World, browser) -> None:
    """A passkey for Pat, made by Chromium's virtual authenticator through the demo page's own code, on
    http://localhost (passkeys.rpId of serve --dev)."""
    pat = world.users["pat"]
    browser.get(f"http://localhost:{world.port}/")
    options = VirtualAuthenticatorOptions()
    options.protocol = VirtualAuthenticatorOptions.Protocol.CTAP2
    options.transport = VirtualAuthenticatorOptions.Transport.INTERNAL
    options.has_resident_key = True
    options.has_user_verification = True
    options.is_user_verified = True
    browser.add_virtual_authenticator(options)
    try:
        tokens = pat["tokens"]
        browser.execute_script("sessionStorage.setItem('latchkey.demo.tokens', JSON.stringify(arguments[0]))", {
            "access_token": tokens["accessToken"], "refresh_token": tokens["refreshToken"], "token_type": "Bearer", "passkey": True})
        outcome = browser.execute_async_script(
            "const done = arguments[0]; addPasskey().then(() => done('added'), (e) => done('failed: ' + e.name + ' ' + e.message));")
        assert outcome == "added", outcome
    finally:
        browser.remove_virtual_authenticator()


def test_one_user(world, browser, screenshots):
    add_passkey(world, browser)
    browser.get_log("browser")  # the demo page's own messages are not the console's
    pat = world.users["pat"]
    go(browser, world, f"#/users/{pat['id']}", "User Pat Passkey")
    assert [row[0] for row in table(browser, "Identities")] == ["apple"]
    assert len(table(browser, "Passkeys")) == 1
    sessions = table(browser, "Sessions")
    assert {row[0] for row in sessions} == set(pat["sessions"]) and all(row[6] == "active" for row in sessions), sessions
    check_page(browser)
    screenshot(browser, screenshots, "05-user")

    # Revoke one session.
    ended = pat["sessions"][0]
    browser.find_element(By.CSS_SELECTOR, f'button[data-session="{ended}"]').click()
    status_says(browser, f"Session {ended} revoked.")
    page(browser, "User Pat Passkey")
    rows = {row[0]: row for row in table(browser, "Sessions")}
    assert rows[ended][6].startswith("ended") and "revoked_by_admin" in rows[ended][6], rows[ended]
    assert rows[pat["sessions"][1]][6] == "active"
    status, user = admin(world, "GET", f"/admin/v1/users/{pat['id']}")
    assert status == 200 and {s["id"]: s.get("revokedAt") is not None for s in user["sessions"]} == {ended: True, pat["sessions"][1]: False}

    # Claims the server refuses (a reserved name), with its reason shown; then claims it takes.
    editor = browser.find_element(By.ID, "claims-editor")
    editor.clear()
    editor.send_keys('{"email": "pat@example.com"}')
    browser.find_element(By.CSS_SELECTOR, "#claims-form button[type=submit]").click()
    refusal = wait(browser, lambda d: d.find_element(By.ID, "claims-error").text, "the claims refusal")
    assert "invalid_claims" in refusal and "email is a claim that JWT" in refusal, refusal
    assert admin(world, "GET", f"/admin/v1/users/{pat['id']}")[1]["claims"] == {}
    screenshot(browser, screenshots, "06-user-claims-refused")
    editor = browser.find_element(By.ID, "claims-editor")
    editor.clear()
    editor.send_keys('{"plan": "pro", "app_roles": ["support"]}')
    browser.find_element(By.CSS_SELECTOR, "#claims-form button[type=submit]").click()
    status_says(browser, "Claims saved.")
    page(browser, "User Pat Passkey")
    assert json.loads(browser.find_element(By.ID, "claims-editor").get_attribute("value")) == {"plan": "pro", "app_roles": ["support"]}
    assert admin(world, "GET", f"/admin/v1/users/{pat['id']}")[1]["claims"] == {"plan": "pro", "app_roles": ["support"]}
    trail = [row[1] for row in table(browser, "Audit trail")]
    assert "admin_claims_set" in trail and "admin_session_revoked" in trail, trail

    # Disable (the last session ends), then enable.
    browser.find_element(By.ID, "disable-user").click()
    status_says(browser, "User disabled")
    wait(browser, lambda d: d.find_element(By.ID, "user-state").text.startswith("disabled since"), "the disabled state")
    assert all(row[6].startswith("ended") for row in table(browser, "Sessions"))
    browser.find_element(By.ID, "enable-user").click()
    status_says(browser, "User enabled.")
    wait(browser, lambda d: d.find_element(By.ID, "user-state").text == "active", "the enabled state")
    check_page(browser)


def test_delete_user_after_typed_confirmation(world, browser, screenshots):
    gone = world.users["gone"]
    go(browser, world, f"#/users/{gone['id']}", "User Dee Leted")
    remove = browser.find_element(By.ID, "delete-user")
    confirm = browser.find_element(By.ID, "delete-confirm")
    assert not remove.is_enabled()
    confirm.send_keys(gone["id"][:-1])
    assert not remove.is_enabled()
    confirm.send_keys(gone["id"][-1])
    assert remove.is_enabled()
    screenshot(browser, screenshots, "07-user-delete-confirmation")
    remove.click()
    page(browser, "Users")
    status_says(browser, f"User {gone['id']} deleted.")
    assert admin(world, "GET", f"/admin/v1/users/{gone['id']}")[0] == 404
    check_page(browser)


def fail_delivery(world: World) -> str:
    """The last attempt of the retry schedule (75 h on) is simulated: a pending delivery is marked failed in the SQLite
    file, as the dispatcher marks it after its tenth attempt."""
    status, listed = admin(world, "GET", f"/admin/v1/webhooks/deliveries?status=pending&limit=200")
    assert status == 200 and listed["deliveries"], listed
    delivery = next(d for d in listed["deliveries"] if d["userId"] == world.users["ada"]["id"])
    now = int(time.time() * 1000)
    with sqlite3.connect(Path(world.folder) / "db.sqlite", timeout=30) as database:
        changed = database.execute(
            "UPDATE webhook_deliveries SET status = 'failed', attempts = 10, finished_at = ?, last_error = ? WHERE id = ?",
            (now, "connection refused", delivery["id"])).rowcount
    assert changed == 1
    return delivery["id"]


def test_webhook_deliveries_and_a_retry(world, browser, screenshots):
    failed = fail_delivery(world)
    view = nav(browser, "Webhook deliveries", "Webhook deliveries")
    headings = [h.text for h in view.find_elements(By.TAG_NAME, "h2")]
    assert headings == ["Failed", "Pending and delivered"], headings
    assert [row[0] for row in table(browser, "Failed deliveries")] == [failed]
    assert len(table(browser, "Pending and delivered deliveries")) >= len(world.users) - 1
    check_page(browser)
    screenshot(browser, screenshots, "08-webhook-deliveries")

    browser.find_element(By.LINK_TEXT, failed).click()
    page(browser, f"Delivery {failed}")
    payload = json.loads(browser.find_element(By.ID, "payload").text)
    assert payload["type"] == "user.created" and payload["data"]["userId"] == world.users["ada"]["id"], payload
    source = browser.page_source
    assert world.webhook_secret not in source and "whsec_" not in source
    assert browser.find_element(By.ID, "delivery-status").text == "failed"
    check_page(browser)
    screenshot(browser, screenshots, "09-webhook-delivery")

    browser.find_element(By.ID, "retry-delivery").click()
    status_says(browser, f"Delivery {failed} is due again.")
    wait(browser, lambda d: d.find_element(By.ID, "delivery-status").text == "pending", "the pending state")
    status, events = admin(world, "GET", "/admin/v1/audit?type=admin_delivery_retried")
    assert status == 200 and [e["detail"] for e in events["events"]] == [f"key=ops delivery={failed}"], events


def test_audit_log_with_filters(world, browser, screenshots):
    nav(browser, "Audit log", "Audit log")
    assert len(table(browser, "Audit events")) > 5
    browser.find_element(By.ID, "audit-type").send_keys("admin_claims_set" + Keys.ENTER)
    wait(browser, lambda d: (rows := table(d, "Audit events")) is not None and {row[1] for row in rows} == {"admin_claims_set"}, "the type filter")
    assert table(browser, "Audit events")[0][2] == world.users["pat"]["id"]
    check_page(browser)
    screenshot(browser, screenshots, "10-audit-log")

    browser.find_element(By.ID, "audit-type").clear()
    browser.find_element(By.ID, "audit-user").send_keys(world.users["pat"]["id"] + Keys.ENTER)
    wait(browser, lambda d: (rows := table(d, "Audit events")) is not None and {row[2] for row in rows} == {world.users["pat"]["id"]}
         and "admin_user_disabled" in {row[1] for row in rows}, "the user filter")
    # Since a time to come: nothing yet.
    since = browser.find_element(By.ID, "audit-since")
    browser.execute_script("arguments[0].value = '2099-01-01T00:00'", since)
    browser.find_element(By.CSS_SELECTOR, "#audit-filters button[type=submit]").click()
    wait(browser, lambda d: "since=2099-" in d.current_url and "No event matches." in d.find_element(By.ID, "view").text, "the since filter")


def test_signing_keys_rotated_after_confirmation(world, browser, screenshots):
    nav(browser, "Signing keys", "Signing keys")
    before = table(browser, "Signing keys")
    assert [row[2] for row in before] == ["active"], before
    browser.find_element(By.ID, "rotate").click()
    panel = browser.find_element(By.ID, "rotate-confirm")
    assert panel.is_displayed() and browser.switch_to.active_element.get_attribute("id") == "rotate-now"
    screenshot(browser, screenshots, "11-signing-keys-confirm")
    browser.find_element(By.ID, "rotate-cancel").click()
    assert not panel.is_displayed() and len(admin(world, "GET", "/admin/v1/keys")[1]["keys"]) == 1
    browser.find_element(By.ID, "rotate").click()
    browser.find_element(By.ID, "rotate-now").click()
    status_says(browser, "New active key")
    page(browser, "Signing keys")
    after = {row[0]: row[2] for row in table(browser, "Signing keys")}
    assert after[before[0][0]] == "retiring" and sorted(after.values()) == ["active", "retiring"], after
    status, keys = admin(world, "GET", "/admin/v1/keys")
    assert status == 200 and {k["kid"]: k["state"] for k in keys["keys"]} == after
    assert all(set(k) <= {"kid", "algorithm", "state", "createdAt", "retireAfter"} for k in keys["keys"])
    check_page(browser)
    screenshot(browser, screenshots, "12-signing-keys")


def test_set_up_findings(world, browser, screenshots):
    view = nav(browser, "Set-up findings", "Set-up findings")
    findings = table(browser, "Findings")
    checks = {row[1]: row[0] for row in findings}
    for check in ("mode", "providers", "signingKeys", "adminKeys", "webhooks[0]", "publicUrl", "encryptionKey", "passkeys.rpId"):
        assert check in checks, checks
    assert "error(s)" in view.find_element(By.ID, "findings-summary").text
    check_page(browser)
    screenshot(browser, screenshots, "13-set-up-findings")


def test_keyboard(world, browser):
    """Each page puts focus on its heading; from there Shift+Tab walks back through the header to the skip link, focus
    is visible, Enter follows a link, and the skip link moves focus to the content."""
    browser.get(f"{world.url}/admin/#/findings")
    page(browser, "Set-up findings")
    assert browser.switch_to.active_element.text == "Set-up findings"

    def back() -> str:
        ActionChains(browser).key_down(Keys.SHIFT).send_keys(Keys.TAB).key_up(Keys.SHIFT).perform()
        return browser.switch_to.active_element.text

    walked = [back() for _ in range(7)]
    assert walked == ["Sign out", "Set-up findings", "Signing keys", "Audit log", "Webhook deliveries", "Users", "Skip to the content"], walked
    ActionChains(browser).send_keys(Keys.TAB).perform()
    assert browser.switch_to.active_element.text == "Users"
    outline = browser.execute_script("const s = getComputedStyle(document.activeElement); return [s.outlineStyle, s.outlineWidth];")
    assert outline == ["solid", "3px"], outline
    ActionChains(browser).send_keys(Keys.ENTER).perform()
    page(browser, "Users")
    assert back() == "Sign out"
    for _ in range(6):
        back()
    assert browser.switch_to.active_element.text == "Skip to the content"
    ActionChains(browser).send_keys(Keys.ENTER).perform()
    assert browser.switch_to.active_element.get_attribute("id") == "main" and browser.current_url.endswith("#/users")


def test_read_only_key(world, browser, screenshots):
    browser.find_element(By.ID, "signout").click()
    wait(browser, lambda d: d.find_element(By.ID, "signin").is_displayed(), "the sign-in form")
    sign_in(browser, world, world.reader_key)
    assert "(read-only)" in browser.find_element(By.ID, "who").text
    pat = world.users["pat"]
    go(browser, world, f"#/users/{pat['id']}", "User Pat Passkey")
    view = browser.find_element(By.ID, "view")
    assert view.find_elements(By.TAG_NAME, "button") == [] and view.find_elements(By.TAG_NAME, "textarea") == []
    assert view.find_elements(By.TAG_NAME, "form") == []
    assert json.loads(browser.find_element(By.ID, "claims").text) == {"plan": "pro", "app_roles": ["support"]}
    columns = browser.execute_script(
        "const t = [...document.querySelectorAll('#view table')].find((t) => t.caption.textContent === 'Sessions');"
        "return [...t.tHead.rows[0].cells].map((c) => c.textContent);")
    assert "Action" not in columns, columns
    check_page(browser)
    screenshot(browser, screenshots, "14-read-only-user")
    for label, heading in (("Webhook deliveries", "Webhook deliveries"), ("Signing keys", "Signing keys"), ("Users", "Users")):
        nav(browser, label, heading)
        # Only the search form's own buttons remain.
        buttons = [b.text for b in browser.find_elements(By.CSS_SELECTOR, "#view button")]
        assert set(buttons) <= {"Search", "Show all"}, (label, buttons)
    check_page(browser)

    # A write forced from the page (the right Origin, the cookie) is refused: the key is read-only.
    for method, path, body in (("POST", "/admin/v1/keys/rotate", None), ("DELETE", f"/admin/v1/sessions/{pat['sessions'][1]}", None),
                               ("PUT", f"/admin/v1/users/{pat['id']}/claims", "{}"), ("POST", f"/admin/v1/users/{pat['id']}/disable", None)):
        status, answer = fetch(browser, method, path, body)
        assert (status, answer.get("error")) == (403, "insufficient_scope"), (method, path, status, answer)
    assert admin(world, "GET", f"/admin/v1/users/{pat['id']}")[1]["claims"] == {"plan": "pro", "app_roles": ["support"]}
    assert len(admin(world, "GET", "/admin/v1/keys")[1]["keys"]) == 2


def test_sign_out(world, browser, screenshots):
    browser.find_element(By.ID, "signout").click()
    wait(browser, lambda d: d.find_element(By.ID, "signin").is_displayed(), "the sign-in form")
    status_says(browser, "Signed out.")
    assert [c for c in browser.get_cookies() if c["name"] == "latchkey_admin"] == []
    assert fetch(browser, "GET", "/admin/session")[0] == 401
    assert fetch(browser, "GET", "/admin/v1/users")[0] == 401
    check_page(browser)
    screenshot(browser, screenshots, "15-signed-out")
    status, events = admin(world, "GET", "/admin/v1/audit?type=admin_console_signed_out")
    assert status == 200 and {e["detail"] for e in events["events"]} == {"key=ops", "key=support"}, events
