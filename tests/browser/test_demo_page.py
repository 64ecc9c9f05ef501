"""End-to-end tests of the development demo page (`latchkey serve --dev`) in a real browser.

Headless Chromium (Selenium) opens `/`, clicks a "Sign in with …" button, fills the emulator's
consent page and waits for the page's own JavaScript (PKCE, code exchange, `/v1/me`) to show the
signed-in user. Nothing here uses Latchkey code; the server is a subprocess on free loopback ports:
    LATCHKEY_BIN=/path/to/latchkey python3 -m pytest -q tests/browser
"""

from __future__ import annotations

import base64
import dataclasses
import json
import uuid

import pytest
from conftest import Server
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

FLOW_TIMEOUT = 20.0  # seconds for a whole sign-in to show its result on the demo page
PAGE_TIMEOUT = 10.0


# --------------------------------------------------------------------------------------------
# Browser
# --------------------------------------------------------------------------------------------


@pytest.fixture
def browser():
    """A fresh headless Chromium per test: a new profile, so no sessionStorage or cookies carry over."""
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--no-proxy-server",  # loopback only: never route through a proxy from the environment
        "--window-size=1024,900",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(PAGE_TIMEOUT * 2)
    try:
        yield driver
    finally:
        driver.quit()


def unique_email(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:12]}@example.com"


def click_provider(driver, server: Server, provider: str, label: str) -> None:
    driver.get(server.base_url + "/")
    button = WebDriverWait(driver, PAGE_TIMEOUT).until(
        EC.element_to_be_clickable((By.CSS_SELECTOR, f'button[data-provider="{provider}"]'))
    )
    assert button.text.strip() == label
    button.click()
    # The demo page's JavaScript sends the browser to /oauth2/authorize, which 303s to the emulator.
    WebDriverWait(driver, PAGE_TIMEOUT).until(lambda d: d.current_url.startswith(server.emulator_url + "/"))
    WebDriverWait(driver, PAGE_TIMEOUT).until(
        EC.presence_of_element_located((By.CSS_SELECTOR, 'button[name="action"][value="continue"]'))
    )


def fill_consent(driver, email: str, given_name: str, family_name: str) -> None:
    for name, value in (("email", email), ("given_name", given_name), ("family_name", family_name)):
        box = driver.find_element(By.NAME, name)
        box.clear()
        box.send_keys(value)


def press(driver, action: str) -> None:
    driver.find_element(By.CSS_SELECTOR, f'button[name="action"][value="{action}"]').click()


def wait_for_status(driver, server: Server, predicate) -> str:
    """Waits until the demo page (back on the server's origin) shows a final `#status`."""

    def settled(d):
        if not d.current_url.startswith(server.base_url + "/"):
            return False
        elements = d.find_elements(By.ID, "status")
        if not elements:
            return False
        text = elements[0].text.strip()
        return text if predicate(text, elements[0]) else False

    try:
        return WebDriverWait(driver, FLOW_TIMEOUT).until(settled)
    except Exception:
        status = driver.find_elements(By.ID, "status")
        pytest.fail(
            f"demo page never settled; url={driver.current_url!r} "
            f"status={status[0].text if status else None!r}\npage:\n{driver.page_source[:3000]}"
        )


def sign_in(driver, server: Server, provider: str, label: str, email: str, given: str, family: str):
    click_provider(driver, server, provider, label)
    fill_consent(driver, email, given, family)
    press(driver, "continue")
    text = wait_for_status(
        driver,
        server,
        lambda t, el: t.startswith("Signed in as") or "error" in (el.get_attribute("class") or "").split(),
    )
    status = driver.find_element(By.ID, "status")
    assert "error" not in (status.get_attribute("class") or ""), f"sign-in failed: {text}"
    assert text.startswith("Signed in as"), text
    # The page replaces /callback?code=… with / once it has redeemed the code.
    assert driver.current_url.rstrip("/") == server.base_url, driver.current_url
    user = json.loads(driver.find_element(By.ID, "user").get_attribute("textContent"))
    tokens = json.loads(driver.find_element(By.ID, "tokens").get_attribute("textContent"))
    return text, user, tokens


def check_tokens(tokens: dict) -> None:
    assert tokens["token_type"] == "Bearer"
    assert isinstance(tokens["access_token"], str) and tokens["access_token"]
    assert isinstance(tokens["expires_in"], int) and tokens["expires_in"] > 0
    assert tokens["refresh_token"].startswith("lkr_"), tokens["refresh_token"]


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------


def test_demo_page_lists_every_provider(browser, server):
    browser.get(server.base_url + "/")
    providers = {
        b.get_attribute("data-provider"): b.text.strip()
        for b in browser.find_elements(By.CSS_SELECTOR, "button[data-provider]")
    }
    assert set(providers) >= {"apple", "google", "microsoft", "oidc", "dropbox", "github", "gitlab", "slack", "discord", "x", "line"}, providers
    assert providers["apple"] == "Sign in with Apple"
    assert providers["google"] == "Sign in with Google"
    assert browser.find_element(By.ID, "status").text == ""


def test_sign_in_with_apple(browser, server):
    email = unique_email("ada")
    text, user, tokens = sign_in(browser, server, "apple", "Sign in with Apple", email, "Ada", "Lovelace")

    assert "Ada Lovelace" in text and "apple" in text, text
    assert user["identities"][0]["provider"] == "apple", user
    assert user["identities"][0]["subject"]
    assert user["givenName"] == "Ada", user
    assert user["familyName"] == "Lovelace", user
    assert user["email"] == email, user
    check_tokens(tokens)


def test_sign_in_with_google(browser, server):
    email = unique_email("grace")
    text, user, tokens = sign_in(browser, server, "google", "Sign in with Google", email, "Grace", "Hopper")

    assert "Grace Hopper" in text and "google" in text, text
    assert user["identities"][0]["provider"] == "google", user
    assert user["identities"][0]["subject"]
    assert user["givenName"] == "Grace", user
    assert user["email"] == email, user
    check_tokens(tokens)


@pytest.mark.parametrize("provider,label", [
    ("microsoft", "Sign in with Microsoft"),
    ("oidc", "Sign in with Emulated OpenID Connect"),
    ("dropbox", "Sign in with Dropbox"),
    ("gitlab", "Sign in with GitLab"),
    ("slack", "Sign in with Slack"),
    ("line", "Sign in with LINE"),
])
def test_sign_in_with_other_providers(browser, server, provider, label):
    email = unique_email(provider)
    text, user, tokens = sign_in(browser, server, provider, label, email, "Mary", "Jackson")

    assert "Mary Jackson" in text and provider in text, text
    assert user["identities"][0]["provider"] == provider, user
    assert user["givenName"] == "Mary", user
    assert user["email"] == email, user
    check_tokens(tokens)


def test_apple_returning_user_keeps_first_name(browser, server):
    """Apple sends `user` (the name) only on the first authorization; the server must keep it."""
    email = unique_email("returning")
    _, first, first_tokens = sign_in(browser, server, "apple", "Sign in with Apple", email, "Ada", "Lovelace")
    assert first["givenName"] == "Ada", first
    check_tokens(first_tokens)

    # A new sign-in from a clean page state (the flow's verifier and tokens live in sessionStorage).
    browser.execute_script("window.sessionStorage.clear();")
    text, second, second_tokens = sign_in(browser, server, "apple", "Sign in with Apple", email, "Someone", "Else")

    assert second["id"] == first["id"], (first, second)
    assert second["identities"][0]["provider"] == "apple", second
    assert second["identities"][0]["subject"] == first["identities"][0]["subject"], (first, second)
    assert second["givenName"] == "Ada", second
    assert second["familyName"] == "Lovelace", second
    assert "Ada Lovelace" in text and "Someone" not in text, text
    check_tokens(second_tokens)
    assert second_tokens["refresh_token"] != first_tokens["refresh_token"]


def test_cancel_at_provider_shows_access_denied(browser, server):
    click_provider(browser, server, "google", "Sign in with Google")
    press(browser, "cancel")
    text = wait_for_status(
        browser, server, lambda t, el: "error" in (el.get_attribute("class") or "").split() and t != ""
    )
    assert "access_denied" in text, text
    assert browser.current_url.rstrip("/") == server.base_url, browser.current_url
    assert browser.find_element(By.ID, "result").get_attribute("hidden") is not None


def test_cancel_at_apple_shows_access_denied(browser, server):
    click_provider(browser, server, "apple", "Sign in with Apple")
    press(browser, "cancel")
    text = wait_for_status(
        browser, server, lambda t, el: "error" in (el.get_attribute("class") or "").split() and t != ""
    )
    assert "access_denied" in text, text


@pytest.mark.parametrize("provider,label,shares_email", [
    ("github", "Sign in with GitHub", True),
    ("discord", "Sign in with Discord", True),
    ("x", "Sign in with X", False),
])
def test_sign_in_with_oauth_providers_without_id_tokens(browser, server, provider, label, shares_email):
    # No ID token: the server reads the user from the provider's API, which gives a display name, not its parts.
    email = unique_email(provider)
    text, user, tokens = sign_in(browser, server, provider, label, email, "Mary", "Jackson")

    assert provider in text, text
    assert user["identities"][0]["provider"] == provider, user
    assert user.get("email") == (email if shares_email else None), user
    check_tokens(tokens)



# --------------------------------------------------------------------------------------------
# Passkeys: Chrome DevTools' virtual authenticator (WebAuthn domain), through Selenium
# --------------------------------------------------------------------------------------------


def add_virtual_authenticator(driver):
    """A platform authenticator that keeps discoverable credentials and verifies the user (Touch ID's stand-in)."""
    from selenium.webdriver.common.virtual_authenticator import VirtualAuthenticatorOptions

    options = VirtualAuthenticatorOptions(
        protocol=VirtualAuthenticatorOptions.Protocol.CTAP2,
        transport=VirtualAuthenticatorOptions.Transport.INTERNAL,
        has_resident_key=True,
        has_user_verification=True,
        is_user_verified=True,
    )
    driver.add_virtual_authenticator(options)


def test_add_a_passkey_then_sign_in_with_it(browser, server):
    # `serve --dev` binds passkeys to rpId localhost and the origin http://localhost:{port}.
    local = dataclasses.replace(server, base_url=server.base_url.replace("127.0.0.1", "localhost"))
    add_virtual_authenticator(browser)
    email = unique_email("passkey")
    _, user, _ = sign_in(browser, local, "apple", "Sign in with Apple", email, "Kay", "Passkey")
    assert [i["provider"] for i in user["identities"]] == ["apple"], user

    browser.find_element(By.ID, "add-passkey").click()
    text = wait_for_status(browser, local, lambda t, el: t.startswith("Passkey added") or "error" in (el.get_attribute("class") or ""))
    assert text.startswith("Passkey added: Demo passkey"), text
    user = json.loads(browser.find_element(By.ID, "user").get_attribute("textContent"))
    assert sorted(i["provider"] for i in user["identities"]) == ["apple", "passkey"], user
    credentials = browser.get_credentials()
    assert len(credentials) == 1 and credentials[0].is_resident_credential, credentials

    browser.find_element(By.ID, "signout").click()
    wait_for_status(browser, local, lambda t, el: t == "Signed out")
    browser.get(local.base_url + "/")
    WebDriverWait(browser, PAGE_TIMEOUT).until(EC.element_to_be_clickable((By.ID, "passkey-signin"))).click()
    text = wait_for_status(browser, local, lambda t, el: t.startswith("Signed in as") or "error" in (el.get_attribute("class") or ""))
    assert text == "Signed in as Kay Passkey with apple, passkey", text
    signed_in = json.loads(browser.find_element(By.ID, "user").get_attribute("textContent"))
    assert signed_in["id"] == user["id"], (signed_in, user)
    tokens = json.loads(browser.find_element(By.ID, "tokens").get_attribute("textContent"))
    claims = json.loads(base64.urlsafe_b64decode(tokens["access_token"].split(".")[1] + "=="))
    assert claims["idp"] == "passkey", claims

    # The passkey session refreshes through POST /v1/token.
    browser.find_element(By.ID, "refresh").click()
    wait_for_status(browser, local, lambda t, el: t.startswith("Signed in as") and json.loads(
        browser.find_element(By.ID, "tokens").get_attribute("textContent"))["refresh_token"] != tokens["refresh_token"])
    assert browser.get_credentials()[0].sign_count >= 1


def test_sign_in_with_a_passkey_on_the_browser_flows_chooser(browser, server):
    import hashlib
    import secrets
    import urllib.parse

    import requests

    local = dataclasses.replace(server, base_url=server.base_url.replace("127.0.0.1", "localhost"))
    add_virtual_authenticator(browser)
    _, user, _ = sign_in(browser, local, "google", "Sign in with Google", unique_email("chooser"), "Cy", "Chooser")
    browser.find_element(By.ID, "add-passkey").click()
    wait_for_status(browser, local, lambda t, el: t.startswith("Passkey added") or "error" in (el.get_attribute("class") or ""))
    assert browser.find_element(By.ID, "status").text.startswith("Passkey added"), browser.find_element(By.ID, "status").text

    # An app's authorization request without a provider shows the chooser; its loopback redirect URI (any port) leads
    # nowhere, so the browser stops there with the code in its address bar.
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    redirect = "http://127.0.0.1:9/callback"
    query = {"response_type": "code", "client_id": "com.example.app", "redirect_uri": redirect, "state": "chooser-state",
             "code_challenge": challenge, "code_challenge_method": "S256"}
    browser.get(local.base_url + "/oauth2/authorize?" + urllib.parse.urlencode(query))
    # Chromium's virtual authenticator may answer the page's conditional (autofill) request by itself, before a click.
    try:
        WebDriverWait(browser, PAGE_TIMEOUT).until(EC.element_to_be_clickable((By.ID, "passkey-signin"))).click()
    except (StaleElementReferenceException, NoSuchElementException):
        pass
    WebDriverWait(browser, FLOW_TIMEOUT).until(lambda d: d.current_url.startswith(redirect))
    back = urllib.parse.parse_qs(urllib.parse.urlsplit(browser.current_url).query)
    assert back["state"] == ["chooser-state"], back
    tokens = requests.post(server.url("/oauth2/token"), data={"grant_type": "authorization_code", "code": back["code"][0],
                           "redirect_uri": redirect, "client_id": "com.example.app", "code_verifier": verifier}, timeout=10).json()
    claims = json.loads(base64.urlsafe_b64decode(tokens["access_token"].split(".")[1] + "=="))
    assert claims["idp"] == "passkey" and claims["sub"] == user["id"], claims


def test_email_code_sign_in_from_the_demo_page(browser, server: Server):
    """The demo page's e-mail form: the code goes to the emulator's mailbox; typed in, it signs in with provider email."""
    import urllib.parse
    import urllib.request

    address = unique_email("mailbox")
    browser.get(server.base_url + "/")
    field = WebDriverWait(browser, PAGE_TIMEOUT).until(EC.presence_of_element_located((By.ID, "email-address")))
    field.send_keys(address)
    browser.find_element(By.ID, "email-send").click()
    WebDriverWait(browser, PAGE_TIMEOUT).until(EC.visibility_of_element_located((By.ID, "email-code")))
    with urllib.request.urlopen(server.emulator_url + "/emulator/mail?to=" + urllib.parse.quote(address), timeout=10) as response:
        messages = json.load(response)["messages"]
    code = messages[-1]["subject"].split(" ")[0]
    assert code.isdigit() and len(code) == 6, messages[-1]["subject"]
    browser.find_element(By.ID, "email-code").send_keys(code)
    browser.find_element(By.ID, "email-verify").click()
    text = wait_for_status(browser, server, lambda t, el: t.startswith("Signed in as") or "error" in (el.get_attribute("class") or "").split())
    assert text.startswith("Signed in as") and text.endswith("with email"), text
    user = json.loads(browser.find_element(By.ID, "user").get_attribute("textContent"))
    assert user["identities"][0]["provider"] == "email" and user["email"] == address
