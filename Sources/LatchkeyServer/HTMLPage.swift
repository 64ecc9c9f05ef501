import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import LatchkeyJOSE
import LatchkeyProviders

/// The few pages the browser flow shows: errors that must not be redirected, the provider chooser, and the
/// development demo. Every page refuses framing (clickjacking), loads nothing from elsewhere and is never cached.
enum HTMLPage {
    static let referrerPolicy = HTTPField.Name("Referrer-Policy")!
    static let frameOptions = HTTPField.Name("X-Frame-Options")!
    static let contentTypeOptions = HTTPField.Name("X-Content-Type-Options")!

    /// `script`: the page runs `'self'`'s scripts; `inlineScript`: it runs this one inline script, allowed by its hash.
    static func headers(script: Bool = false, inlineScript: String? = nil) -> HTTPFields {
        let scripts =
            inlineScript.map { "; script-src 'sha256-\(Data(SHA256.hash(data: Array($0.utf8))).base64EncodedString())'; connect-src 'self'" }
            ?? (script ? "; script-src 'self'; connect-src 'self'" : "")
        return [
            .contentType: "text/html; charset=utf-8", .cacheControl: "no-store", frameOptions: "DENY", contentTypeOptions: "nosniff",
            referrerPolicy: "no-referrer",
            .contentSecurityPolicy:
                "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'" + scripts,
        ]
    }

    static func escape(_ text: some StringProtocol) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: ">", with: "&gt;")
            .replacingOccurrences(of: "\"", with: "&quot;").replacingOccurrences(of: "'", with: "&#39;")
    }

    static func page(_ title: String, _ body: String, status: HTTPResponse.Status = .ok, script: Bool = false, inlineScript: String? = nil) -> Response {
        let html = """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
            <title>\(escape(title))</title>
            <style>body{font-family:-apple-system,system-ui,sans-serif;max-width:34rem;margin:3rem auto;padding:0 1rem;color:#222}
            a.button,button{display:block;width:100%;box-sizing:border-box;margin:.6rem 0;padding:.7rem 1rem;border:1px solid #888;border-radius:.5rem;
            background:#fff;color:#111;text-align:center;text-decoration:none;font-size:1rem;cursor:pointer}a.button:hover,button:hover{background:#f2f2f2}
            pre{background:#f6f6f6;padding:.7rem;overflow:auto;font-size:.8rem;white-space:pre-wrap;word-break:break-all}.error{color:#a00}</style></head>
            <body>
            \(body)\(inlineScript.map { "\n<script>\($0)</script>" } ?? "")
            </body></html>
            """
        return Response(status: status, headers: headers(script: script, inlineScript: inlineScript), body: .init(byteBuffer: ByteBuffer(string: html)))
    }

    /// A request that cannot be sent back to the app (unknown client or redirect URI, unknown state): shown, never redirected.
    static func error(title: String, _ message: String) -> Response {
        page(title, "<h1>\(escape(title))</h1>\n<p class=\"error\">\(escape(message))</p>", status: .badRequest)
    }

    /// The provider chooser of `/oauth2/authorize` without `provider`: plain links that repeat the validated
    /// request with `provider` added. Following one changes nothing until the user signs in at the provider. With
    /// `passkeys`, a passkey sign-in too (offered in the username field by conditional mediation), which finishes the
    /// same request through `POST /oauth2/passkey`.
    static func chooser(providers: [(name: String, displayName: String)], query: [String: String], clientID: String, passkeys: Bool = false) -> Response {
        let fields = query.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
        let buttons = providers.map { provider in
            let href = "/oauth2/authorize?" + formURLEncoded(fields + [("provider", provider.name)])
            return #"<a class="button" rel="noreferrer" href="\#(escape(href))">Continue with \#(escape(provider.displayName))</a>"#
        }.joined(separator: "\n")
        let passkey =
            passkeys
            ? """

            <input id="passkey-username" autocomplete="username webauthn" placeholder="Username or passkey" aria-label="Username or passkey">
            <button type="button" id="passkey-signin" data-authorization="\(escape(formURLEncoded(fields)))">Sign in with a passkey</button>
            <p id="passkey-status" role="status"></p>
            """ : ""
        let body = """
            <h1>Sign in</h1>
            <p>to <strong>\(escape(clientID))</strong></p>
            \(providers.isEmpty && !passkeys ? "<p class=\"error\">No provider is available to this app.</p>" : buttons + passkey)
            """
        return page("Sign in", body, inlineScript: passkeys ? chooserPasskeyScript : nil)
    }

    /// WebAuthn's JSON forms by hand (older browsers lack `parse…FromJSON` and `toJSON`), and a passkey sign-in whose
    /// assertion `finish` sends on; shared by the chooser and the demo.
    static let passkeyJavaScript = """
        const b64url = (bytes) => btoa(String.fromCharCode(...new Uint8Array(bytes))).replace(/\\+/g, "-").replace(/\\//g, "_").replace(/=+$/, "");
        const bytes = (text) => Uint8Array.from(atob(text.replace(/-/g, "+").replace(/_/g, "/")), (c) => c.charCodeAt(0));
        const descriptors = (list) => (list || []).map((d) => ({ ...d, id: bytes(d.id) }));
        async function api(path, body, bearer) {
          const headers = { "Content-Type": "application/json" };
          if (bearer) { headers.Authorization = "Bearer " + bearer; }
          const response = await fetch(path, { method: "POST", headers, body: JSON.stringify(body || {}) });
          const answer = await response.json();
          if (!response.ok) { throw new Error(answer.error + ": " + answer.error_description); }
          return answer;
        }
        // The autofill's pending request: a browser takes one WebAuthn request at a time, and ends an aborted one later.
        let conditional = null, conditionalEnded = Promise.resolve();
        async function endConditional() {
          if (conditional) { conditional.abort(); conditional = null; }
          await conditionalEnded;
        }
        async function passkeyAssertion(mediation) {
          await endConditional();
          const abort = new AbortController();
          if (mediation) { conditional = abort; }
          const options = await api("/v1/auth/passkey/options");
          // Offered quietly only where passkeys can work: on passkeys.rpId or a subdomain.
          const host = location.hostname;
          if (mediation && host !== options.rpId && !host.endsWith("." + options.rpId)) { return null; }
          const request = navigator.credentials.get({ mediation, signal: abort.signal,
            publicKey: { ...options, challenge: bytes(options.challenge), allowCredentials: descriptors(options.allowCredentials) } });
          if (mediation) { conditionalEnded = request.then(() => {}, () => {}); }
          const credential = await request;
          const r = credential.response;
          return { challengeId: options.challengeId, credential: { id: credential.id, rawId: b64url(credential.rawId), type: credential.type,
            response: { clientDataJSON: b64url(r.clientDataJSON), authenticatorData: b64url(r.authenticatorData), signature: b64url(r.signature),
              userHandle: r.userHandle ? b64url(r.userHandle) : undefined } } };
        }
        function offerPasskeys(button, finish, fail, autofill) {
          const run = (mediation) => passkeyAssertion(mediation).then((signed) => signed && finish(signed));
          button.addEventListener("click", () => run(undefined).catch(fail));
          // In the username field's autofill; a conditional request that ends without a choice says nothing.
          if (autofill && window.PublicKeyCredential && PublicKeyCredential.isConditionalMediationAvailable) {
            PublicKeyCredential.isConditionalMediationAvailable().then((yes) => {
              if (yes) { run("conditional").catch((e) => console.log("conditional passkey request ended: " + e.name)); }
            });
          }
        }
        """

    /// The chooser's passkey sign-in: the assertion and the authorization request to `POST /oauth2/passkey`, then on
    /// to the app's redirect URI.
    static let chooserPasskeyScript = """
        "use strict";
        \(passkeyJavaScript)
        const chooserButton = document.getElementById("passkey-signin");
        offerPasskeys(chooserButton, async (signed) => {
          const answer = await api("/oauth2/passkey", { authorization: chooserButton.dataset.authorization, ...signed });
          location.assign(answer.redirectTo);
        }, (e) => { const el = document.getElementById("passkey-status"); el.textContent = e.message; el.className = "error"; }, true);
        """

    /// `serve --dev`'s demo: a button per provider that runs the whole browser flow as a public client with PKCE,
    /// then shows the user and the tokens; with passkeys, a passkey sign-in (offered in the username field too, by
    /// conditional mediation) and "Add a passkey" for the signed-in user.
    static func demo(providers: [(name: String, displayName: String)], clientID: String, passkeys: Bool, email: Bool = false) -> Response {
        var buttons = providers.map { #"<button type="button" data-provider="\#(escape($0.name))">Sign in with \#(escape($0.displayName))</button>"# }
            .joined(separator: "\n")
        if passkeys {
            buttons += """

                <input id="passkey-username" autocomplete="username webauthn" placeholder="Username or passkey" aria-label="Username or passkey">
                <button type="button" id="passkey-signin">Sign in with a passkey</button>
                """
        }
        if email {
            buttons += """

                <form id="email-form">
                <input id="email-address" type="email" autocomplete="email" placeholder="E-mail address" aria-label="E-mail address">
                <button type="submit" id="email-send">Sign in with e-mail</button>
                <input id="email-code" inputmode="numeric" autocomplete="one-time-code" placeholder="Code" aria-label="Code" hidden>
                <button type="button" id="email-verify" hidden>Sign in with the code</button>
                </form>
                <p>Development sends no mail: the code is in the emulator's mailbox, <code>GET /emulator/mail?to=ADDRESS</code>.</p>
                """
        }
        let body = """
            <h1>Latchkey</h1>
            <p>This development server signs in through the emulator's consent pages, as the public client
            <code id="client" data-client-id="\(escape(clientID))">\(escape(clientID))</code> with PKCE.</p>
            <div id="providers">\(buttons)</div>
            <p id="status" role="status"></p>
            <div id="result" hidden>
            <h2>User</h2><pre id="user"></pre>
            <h2>Tokens</h2><pre id="tokens"></pre>
            <button type="button" id="refresh">Refresh the tokens</button>
            \(passkeys ? #"<button type="button" id="add-passkey">Add a passkey</button>"# : "")
            <button type="button" id="signout">Sign out</button>
            </div>
            <script src="/demo.js"></script>
            """
        return page("Latchkey demo", body, script: true)
    }

    static func demoScript() -> Response {
        Response(
            status: .ok, headers: [.contentType: "text/javascript; charset=utf-8", .cacheControl: "no-store", contentTypeOptions: "nosniff"],
            body: .init(byteBuffer: ByteBuffer(string: demoJavaScript)))
    }

    /// The demo's client side: PKCE with WebCrypto, `/oauth2/authorize`, then `/oauth2/token` and `/v1/me`.
    static let demoJavaScript = """
        "use strict";
        const clientID = document.getElementById("client").dataset.clientId;
        const redirectURI = location.origin + "/callback";
        const status = (text, error) => { const el = document.getElementById("status"); el.textContent = text; el.className = error ? "error" : ""; };
        const random = () => b64url(crypto.getRandomValues(new Uint8Array(32)));

        async function start(provider) {
          const verifier = random(), state = random();
          const challenge = b64url(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)));
          sessionStorage.setItem("latchkey.demo", JSON.stringify({ verifier, state }));
          const query = new URLSearchParams({ response_type: "code", client_id: clientID, redirect_uri: redirectURI, code_challenge: challenge,
            code_challenge_method: "S256", state, provider });
          location.assign("/oauth2/authorize?" + query);
        }

        async function token(fields) {
          const response = await fetch("/oauth2/token", { method: "POST", body: new URLSearchParams({ client_id: clientID, ...fields }) });
          const body = await response.json();
          if (!response.ok) { throw new Error(body.error + ": " + body.error_description); }
          return body;
        }

        \(passkeyJavaScript)
        async function addPasskey() {
          await endConditional();
          const tokens = JSON.parse(sessionStorage.getItem("latchkey.demo.tokens"));
          const options = await api("/v1/me/passkeys/options", {}, tokens.access_token);
          const credential = await navigator.credentials.create({ publicKey: { ...options, challenge: bytes(options.challenge),
            user: { ...options.user, id: bytes(options.user.id) }, excludeCredentials: descriptors(options.excludeCredentials) } });
          const r = credential.response;
          const passkey = await api("/v1/me/passkeys", { name: "Demo passkey", credential: { id: credential.id, rawId: b64url(credential.rawId),
            type: credential.type, response: { clientDataJSON: b64url(r.clientDataJSON), attestationObject: b64url(r.attestationObject),
            transports: r.getTransports ? r.getTransports() : [] } } }, tokens.access_token);
          await show(tokens);
          status("Passkey added: " + passkey.name + " (" + passkey.id + ")");
        }

        async function show(tokens) {
          sessionStorage.setItem("latchkey.demo.tokens", JSON.stringify(tokens));
          const me = await fetch("/v1/me", { headers: { Authorization: "Bearer " + tokens.access_token } });
          const user = await me.json();
          if (!me.ok) { throw new Error(user.error + ": " + user.error_description); }
          document.getElementById("user").textContent = JSON.stringify(user, null, 2);
          document.getElementById("tokens").textContent = JSON.stringify(tokens, null, 2);
          document.getElementById("result").hidden = false;
          const name = [user.givenName, user.familyName].filter(Boolean).join(" ") || user.email || user.id;
          status("Signed in as " + name + " with " + user.identities.map((i) => i.provider).join(", "));
        }

        async function finish() {
          const query = new URLSearchParams(location.search);
          const saved = JSON.parse(sessionStorage.getItem("latchkey.demo") || "null");
          sessionStorage.removeItem("latchkey.demo");
          history.replaceState(null, "", "/");
          if (query.get("error")) { throw new Error(query.get("error") + ": " + (query.get("error_description") || "")); }
          if (!saved || saved.state !== query.get("state")) { throw new Error("the state does not match the sign-in this page started"); }
          status("Redeeming the code…");
          await show(await token({ grant_type: "authorization_code", code: query.get("code"), redirect_uri: redirectURI, code_verifier: saved.verifier }));
        }

        for (const button of document.querySelectorAll("[data-provider]")) {
          button.addEventListener("click", () => start(button.dataset.provider).catch((e) => status(e.message, true)));
        }
        document.getElementById("refresh").addEventListener("click", async () => {
          try {
            const tokens = JSON.parse(sessionStorage.getItem("latchkey.demo.tokens"));
            // A passkey or e-mail session is the app's own (POST /v1/token), not the browser flow's client's.
            if (tokens.passkey) {
              const pair = await api("/v1/token", { grantType: "refresh_token", refreshToken: tokens.refresh_token });
              await show({ access_token: pair.accessToken, token_type: pair.tokenType, expires_in: pair.expiresIn, refresh_token: pair.refreshToken, passkey: true });
            } else {
              await show(await token({ grant_type: "refresh_token", refresh_token: tokens.refresh_token }));
            }
          } catch (e) { status(e.message, true); }
        });
        const passkeyButton = document.getElementById("passkey-signin");
        if (passkeyButton) {
          offerPasskeys(passkeyButton, async (signed) => {
            const answer = await api("/v1/auth/passkey", signed);
            await show({ access_token: answer.accessToken, token_type: answer.tokenType, expires_in: answer.expiresIn, refresh_token: answer.refreshToken,
              passkey: true });
          }, (e) => status(e.message, true), location.pathname === "/");
        }
        const emailForm = document.getElementById("email-form");
        if (emailForm) {
          const address = () => document.getElementById("email-address").value;
          emailForm.addEventListener("submit", (event) => {
            event.preventDefault();
            api("/v1/auth/email/start", { email: address() }).then(() => {
              for (const id of ["email-code", "email-verify"]) { document.getElementById(id).hidden = false; }
              status("A code is on its way to " + address());
            }, (e) => status(e.message, true));
          });
          document.getElementById("email-verify").addEventListener("click", () => {
            api("/v1/auth/email/verify", { email: address(), code: document.getElementById("email-code").value }).then((answer) => show({
              access_token: answer.accessToken, token_type: answer.tokenType, expires_in: answer.expiresIn, refresh_token: answer.refreshToken, passkey: true
            }), (e) => status(e.message, true));
          });
        }
        const addButton = document.getElementById("add-passkey");
        if (addButton) { addButton.addEventListener("click", () => addPasskey().catch((e) => status(e.message, true))); }
        document.getElementById("signout").addEventListener("click", async () => {
          const tokens = JSON.parse(sessionStorage.getItem("latchkey.demo.tokens") || "null");
          if (tokens && tokens.passkey) {
            await fetch("/v1/logout", { method: "POST", headers: { Authorization: "Bearer " + tokens.access_token } });
          } else if (tokens) { await fetch("/oauth2/revoke", { method: "POST", body: new URLSearchParams({ client_id: clientID, token: tokens.refresh_token }) }); }
          sessionStorage.removeItem("latchkey.demo.tokens");
          document.getElementById("result").hidden = true;
          status("Signed out");
        });
        if (location.pathname === "/callback") { finish().catch((e) => status(e.message, true)); }
        """
}
