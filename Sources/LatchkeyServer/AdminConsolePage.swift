import Foundation
import HTTPTypes
import Hummingbird

/// The admin console's page, script and style (`/admin/`, `/admin/console.js`, `/admin/console.css`): served by the
/// server itself, with no build step and nothing from elsewhere. The page has no inline script or style, so its
/// content security policy allows only this server's own files.
enum AdminConsolePage {
    /// `script-src` and `style-src` are this server's files only; requests go to this server only; no page may frame it.
    static let contentSecurityPolicy =
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

    static func headers(contentType: String) -> HTTPFields {
        [
            .contentType: contentType, .cacheControl: "no-store", HTMLPage.contentTypeOptions: "nosniff", HTMLPage.frameOptions: "DENY",
            HTMLPage.referrerPolicy: "no-referrer", .contentSecurityPolicy: contentSecurityPolicy,
        ]
    }

    static func page() -> Response {
        Response(status: .ok, headers: headers(contentType: "text/html; charset=utf-8"), body: .init(byteBuffer: ByteBuffer(string: html)))
    }

    static func asset(_ text: String, contentType: String) -> Response {
        Response(status: .ok, headers: headers(contentType: contentType), body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    /// While no admin key exists: what turns the console on.
    static func off() -> Response {
        let body = """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><title>Latchkey admin: off</title></head>
            <body><h1>The admin console is off</h1>
            <p>It is off, as the admin API is, until an admin key exists. On the server: <code>latchkey admin-keys create --name NAME</code>.</p>
            </body></html>
            """
        return Response(status: .notFound, headers: headers(contentType: "text/html; charset=utf-8"), body: .init(byteBuffer: ByteBuffer(string: body)))
    }

    static let html = #"""
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
        <title>Latchkey admin</title>
        <link rel="stylesheet" href="/admin/console.css">
        <script src="/admin/console.js" defer></script>
        </head>
        <body>
        <a class="skip" href="#main">Skip to the content</a>
        <header>
        <p class="brand">Latchkey admin</p>
        <nav id="nav" aria-label="Console" hidden>
        <ul>
        <li><a href="#/users" data-section="users">Users</a></li>
        <li><a href="#/deliveries" data-section="deliveries">Webhook deliveries</a></li>
        <li><a href="#/audit" data-section="audit">Audit log</a></li>
        <li><a href="#/keys" data-section="keys">Signing keys</a></li>
        <li><a href="#/findings" data-section="findings">Set-up findings</a></li>
        </ul>
        </nav>
        <div id="whoami" hidden><span id="who"></span><button type="button" id="signout" class="secondary">Sign out</button></div>
        </header>
        <main id="main" tabindex="-1">
        <noscript><p>The console needs JavaScript.</p></noscript>
        <section id="signin" hidden aria-labelledby="signin-title">
        <h1 id="signin-title">Sign in</h1>
        <p>Paste an admin key, made on the server with <code>latchkey admin-keys create --name NAME</code> (add <code>--read-only</code> for a key that only reads).
        The console keeps a session of 12 hours in a cookie, never the key.</p>
        <form id="signin-form" method="post" action="/admin/session">
        <label for="key">Admin key</label>
        <input id="key" name="key" type="password" autocomplete="off" spellcheck="false" required aria-describedby="signin-error">
        <button type="submit">Sign in</button>
        </form>
        <p id="signin-error" class="error" role="alert"></p>
        </section>
        <p id="status" role="status" aria-live="polite"></p>
        <div id="view"></div>
        </main>
        </body></html>
        """#

    static let style = #"""
        :root{color-scheme:light;--fg:#1b1b1b;--muted:#4a4a4a;--link:#0b57a4;--danger:#a1161b;--line:#c4c9cf;--panel:#f3f5f7;--ok:#1d6b2a;--warn:#8a4b00}
        *{box-sizing:border-box}
        body{margin:0;font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:#fff}
        header{display:flex;flex-wrap:wrap;align-items:center;gap:.5rem 1.5rem;padding:.75rem 1.5rem;border-bottom:1px solid var(--line);background:var(--panel)}
        .brand{font-weight:700;margin:0}
        nav ul{display:flex;flex-wrap:wrap;gap:.25rem 1.25rem;list-style:none;margin:0;padding:0}
        nav a[aria-current=page]{font-weight:700;text-decoration-thickness:3px}
        #whoami{margin-left:auto;display:flex;align-items:center;gap:.75rem;flex-wrap:wrap}
        a{color:var(--link)}
        main{padding:1rem 1.5rem 3rem;max-width:80rem}
        h1{font-size:1.6rem;margin:.5rem 0 1rem}
        h2{font-size:1.2rem;margin:1.75rem 0 .5rem}
        :focus-visible{outline:3px solid #c25e00;outline-offset:2px}
        h1:focus{outline:none}
        button{font:inherit;white-space:nowrap;padding:.35rem .9rem;border:1px solid var(--link);border-radius:.35rem;background:var(--link);color:#fff;cursor:pointer}
        button:hover{background:#083f78}
        button.secondary{background:#fff;color:var(--link)}
        button.secondary:hover{background:#e8f0f9}
        button.danger{background:var(--danger);border-color:var(--danger);color:#fff}
        button.danger:hover{background:#7c1014}
        button:disabled,button:disabled:hover{background:#e4e4e4;color:#4d4d4d;border-color:#8c8c8c;cursor:not-allowed}
        input,textarea{font:inherit;padding:.35rem .5rem;border:1px solid #6b6b6b;border-radius:.25rem;color:var(--fg);background:#fff;max-width:100%}
        textarea{display:block;width:100%;min-height:10rem;font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.9rem}
        label{display:block;font-weight:600;margin-bottom:.2rem}
        .fields{display:flex;flex-wrap:wrap;gap:.75rem 1rem;align-items:flex-end;margin:.5rem 0 1rem}
        .help{color:var(--muted);margin:.1rem 0 .4rem}
        table{border-collapse:collapse;width:100%;margin:.25rem 0 1rem;font-size:.95rem}
        caption{position:absolute;width:1px;height:1px;margin:-1px;padding:0;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap;border:0}
        th,td{text-align:left;vertical-align:top;padding:.4rem .55rem;border-bottom:1px solid var(--line)}
        th{background:var(--panel);white-space:nowrap}
        td code,td a{overflow-wrap:anywhere}
        td code.nowrap{white-space:nowrap;overflow-wrap:normal}
        code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.9em}
        pre{background:var(--panel);border:1px solid var(--line);padding:.75rem;overflow:auto;white-space:pre-wrap;overflow-wrap:anywhere}
        dl{display:grid;grid-template-columns:max-content 1fr;gap:.25rem 1.25rem;margin:0 0 1rem}
        dt{font-weight:600}
        dd{margin:0;overflow-wrap:anywhere}
        fieldset{border:1px solid var(--line);border-radius:.35rem;margin:1.5rem 0;padding:.75rem 1rem}
        legend{font-weight:700;padding:0 .3rem}
        .error{color:var(--danger);font-weight:600}
        .error:empty{display:none}
        .empty{color:var(--muted);font-style:italic}
        .status-ok{color:var(--ok);font-weight:600}
        .status-warning{color:var(--warn);font-weight:600}
        .status-error{color:var(--danger);font-weight:600}
        .confirm{border:2px solid var(--danger);border-radius:.35rem;padding:.5rem 1rem 1rem;margin:.5rem 0;max-width:48rem}
        .paging{display:flex;gap:1.5rem}
        #signin{max-width:34rem}
        #signin input{width:100%;margin-bottom:.75rem}
        #status{margin:0 0 .75rem;padding:.5rem 1rem;border-left:4px solid var(--link);background:#e8f0f9;max-width:60rem}
        #status:empty{display:none}
        .skip{position:absolute;left:-10000px;top:.5rem}
        .skip:focus{left:1rem;background:#fff;padding:.5rem;z-index:2}
        [hidden]{display:none!important}
        """#

    static let script = #"""
        "use strict";
        // The admin console: a small single-page app over /admin/v1, signed in by the console's cookie (HttpOnly: this
        // script never sees it). Everything shown is set as text, never parsed as HTML.
        (() => {
          const $ = (id) => document.getElementById(id);
          let session = null;
          let rendering = 0;
          // Said once the next page is shown (a hash change clears the status line first).
          let pending = "";

          function h(tag, attributes, ...children) {
            const element = document.createElement(tag);
            for (const [name, value] of Object.entries(attributes || {})) {
              if (value === undefined || value === null || value === false) { continue; }
              if (name.startsWith("on")) { element.addEventListener(name.slice(2), value); } else { element.setAttribute(name, value === true ? "" : value); }
            }
            for (const child of children.flat()) {
              if (child === undefined || child === null || child === false) { continue; }
              element.append(child instanceof Node ? child : document.createTextNode(String(child)));
            }
            return element;
          }

          class APIError extends Error {
            constructor(status, body) {
              super(body && body.error_description ? body.error_description : "the server answered " + status);
              this.status = status;
              this.code = (body && body.error) || "http_" + status;
            }
          }

          async function api(method, path, body) {
            const options = { method, headers: { Accept: "application/json" }, credentials: "same-origin" };
            if (body !== undefined) {
              options.headers["Content-Type"] = "application/json";
              options.body = typeof body === "string" ? body : JSON.stringify(body);
            }
            const response = await fetch(path, options);
            const text = await response.text();
            let json = null;
            try { json = text ? JSON.parse(text) : null; } catch (ignored) { json = null; }
            if (!response.ok) {
              const error = new APIError(response.status, json);
              if (response.status === 401 && path.startsWith("/admin/v1/")) { showSignIn("The console session has ended: sign in again."); }
              throw error;
            }
            return json;
          }

          const enc = encodeURIComponent;
          const canWrite = () => session !== null && !session.readOnly;
          const when = (iso) => (iso ? String(iso).replace("T", " ").replace(/(\.\d+)?Z$/, " UTC") : "—");
          const say = (text) => { $("status").textContent = text; };

          function go(hash) {
            if (location.hash === hash) { route(); } else { location.hash = hash; }
          }

          function field(id, label, value, attributes) {
            return h("div", { class: "field" }, h("label", { for: id }, label), h("input", { id, name: id, value: value || "", ...(attributes || {}) }));
          }

          function table(caption, columns, rows, empty) {
            if (rows.length === 0) { return h("p", { class: "empty" }, empty); }
            return h("table", {},
              h("caption", {}, caption),
              h("thead", {}, h("tr", {}, columns.map((column) => h("th", { scope: "col" }, column)))),
              h("tbody", {}, rows.map((cells) => h("tr", {}, cells.map((cell) => h("td", {}, cell))))));
          }

          function alertBox(id) { return h("p", { id, class: "error", role: "alert" }); }

          function failure(error) {
            return [h("h1", { tabindex: "-1" }, "Something went wrong"), h("p", { class: "error", role: "alert" }, error.code + ": " + error.message)];
          }

          // MARK: Signing in and out

          function showSignIn(message) {
            session = null;
            $("nav").hidden = true;
            $("whoami").hidden = true;
            $("view").replaceChildren();
            $("signin").hidden = false;
            $("signin-error").textContent = message || "";
            document.title = "Sign in — Latchkey admin";
            $("key").focus();
          }

          function showConsole() {
            $("signin").hidden = true;
            $("nav").hidden = false;
            $("whoami").hidden = false;
            $("who").textContent = "Signed in with the admin key " + session.name + (session.readOnly ? " (read-only)" : "")
              + " until " + when(session.expiresAt);
          }

          $("signin-form").addEventListener("submit", async (event) => {
            event.preventDefault();
            const key = $("key").value.trim();
            $("signin-error").textContent = "";
            try {
              session = await api("POST", "/admin/session", { key });
              $("key").value = "";
              showConsole();
              pending = "Signed in as " + session.name + ".";
              if (!location.hash.startsWith("#/")) { location.hash = "#/users"; } else { say(pending); pending = ""; await route(); }
            } catch (error) {
              $("signin-error").textContent = "Sign-in refused: " + error.message;
              $("key").focus();
            }
          });

          $("signout").addEventListener("click", async () => {
            try { await api("POST", "/admin/session/logout"); } catch (ignored) { /* the cookie is cleared either way */ }
            showSignIn("Signed out.");
            say("Signed out.");
          });

          // MARK: Pages

          async function usersPage(query) {
            const search = h("form", { id: "user-search", role: "search", "aria-label": "Find users" },
              h("div", { class: "fields" },
                field("search-email", "E-mail", query.get("email"), { type: "text", autocomplete: "off", spellcheck: "false" }),
                field("search-provider", "Provider", query.get("provider"), { autocomplete: "off", spellcheck: "false", list: "providers" }),
                field("search-subject", "Subject at the provider", query.get("subject"), { autocomplete: "off", spellcheck: "false" }),
                field("search-id", "User id", "", { autocomplete: "off", spellcheck: "false" }),
                h("button", { type: "submit" }, "Search"),
                h("button", { type: "button", class: "secondary", onclick: () => go("#/users") }, "Show all")),
              h("datalist", { id: "providers" }, ["apple", "google", "microsoft", "github", "passkey", "email"].map((name) => h("option", { value: name }))),
              alertBox("search-error"));
            search.addEventListener("submit", (event) => {
              event.preventDefault();
              const id = $("search-id").value.trim();
              if (id) { go("#/users/" + enc(id)); return; }
              const next = new URLSearchParams();
              for (const [name, input] of [["email", "search-email"], ["provider", "search-provider"], ["subject", "search-subject"]]) {
                const value = $(input).value.trim();
                if (value) { next.set(name, value); }
              }
              if (next.has("subject") && !next.has("provider")) { $("search-error").textContent = "A subject is searched with its provider."; return; }
              go("#/users" + (next.toString() ? "?" + next : ""));
            });
            const request = new URLSearchParams({ limit: "20" });
            for (const name of ["email", "provider", "subject", "cursor"]) { if (query.get(name)) { request.set(name, query.get(name)); } }
            const list = await api("GET", "/admin/v1/users?" + request);
            const rows = list.users.map((user) => [
              h("a", { href: "#/users/" + enc(user.id) }, user.id),
              user.email || "—",
              [user.givenName, user.familyName].filter(Boolean).join(" ") || "—",
              user.identities.map((identity) => identity.provider).join(", ") || "—",
              when(user.createdAt),
              user.disabledAt ? "disabled" : "active",
            ]);
            const paging = [];
            if (query.get("cursor")) {
              const first = new URLSearchParams(query);
              first.delete("cursor");
              paging.push(h("a", { href: "#/users" + (first.toString() ? "?" + first : "") }, "First page"));
            }
            if (list.nextCursor) {
              const next = new URLSearchParams(query);
              next.set("cursor", list.nextCursor);
              paging.push(h("a", { href: "#/users?" + next, id: "next-page" }, "Next page"));
            }
            const filtered = ["email", "provider", "subject"].some((name) => query.get(name));
            return {
              title: "Users",
              nodes: [
                h("h1", { tabindex: "-1" }, "Users"), search,
                h("h2", { id: "results" }, filtered ? "Matching users" : "All users, oldest first"),
                table("Users", ["User id", "E-mail", "Name", "Signs in with", "Created", "State"], rows, "No user matches."),
                paging.length ? h("nav", { "aria-label": "Pages", class: "paging" }, paging) : null,
              ],
            };
          }

          async function userPage(id) {
            const [user, audit] = await Promise.all([
              api("GET", "/admin/v1/users/" + enc(id)),
              api("GET", "/admin/v1/audit?limit=50&userId=" + enc(id)),
            ]);
            const reload = async (message) => { await route(); say(message); };
            const act = (work, message) => async () => {
              try { await work(); await reload(typeof message === "function" ? message() : message); } catch (error) { say("Refused: " + error.message); }
            };
            const name = [user.givenName, user.familyName].filter(Boolean).join(" ");
            const identities = user.identities.filter((identity) => identity.provider !== "passkey");
            const passkeys = user.identities.filter((identity) => identity.provider === "passkey");
            const nodes = [
              h("p", {}, h("a", { href: "#/users" }, "← Users")),
              h("h1", { tabindex: "-1" }, "User " + (name || user.email || user.id)),
              h("dl", {},
                h("dt", {}, "User id"), h("dd", {}, h("code", {}, user.id)),
                h("dt", {}, "E-mail"), h("dd", {}, user.email ? user.email + (user.emailVerified ? " (verified)" : " (not verified)") : "—"),
                h("dt", {}, "Created"), h("dd", {}, when(user.createdAt)),
                h("dt", {}, "State"), h("dd", { id: "user-state" }, user.disabledAt ? "disabled since " + when(user.disabledAt) : "active"),
                user.importedFrom ? [h("dt", {}, "Imported from"), h("dd", {}, user.importedFrom.source + " (" + user.importedFrom.id + ")")] : null),
              h("h2", {}, "Identities"),
              table("Identities", ["Provider", "Subject", "E-mail", "First seen"],
                identities.map((identity) => [identity.provider, h("code", {}, identity.subject), identity.email || "—", when(identity.firstSeenAt)]),
                "No identity at a provider."),
              h("h2", {}, "Passkeys"),
              table("Passkeys", ["Credential", "Added"], passkeys.map((passkey) => [h("code", {}, passkey.subject), when(passkey.firstSeenAt)]),
                "No passkey."),
              h("h2", {}, "Sessions"),
            ];
            const sessions = user.sessions || [];
            const live = sessions.filter((item) => !item.revokedAt);
            nodes.push(table("Sessions", ["Session", "App", "Created", "Last used", "Expires", "Device", "State"].concat(canWrite() ? ["Action"] : []),
              sessions.map((item) => {
                const cells = [h("code", {}, item.id), item.clientId, when(item.createdAt), when(item.lastUsedAt), when(item.expiresAt),
                  item.userAgent || "—",
                  item.revokedAt ? "ended " + when(item.revokedAt) + (item.revocationReason ? " (" + item.revocationReason + ")" : "") : "active"];
                if (canWrite()) {
                  cells.push(item.revokedAt ? "—" : h("button", {
                    type: "button", class: "secondary", "data-session": item.id, "aria-label": "Revoke session " + item.id,
                    onclick: act(() => api("DELETE", "/admin/v1/sessions/" + enc(item.id)), "Session " + item.id + " revoked."),
                  }, "Revoke"));
                }
                return cells;
              }), "No session."));
            if (canWrite() && live.length > 1) {
              nodes.push(h("p", {}, h("button", {
                type: "button", class: "secondary", id: "revoke-all",
                onclick: act(() => api("DELETE", "/admin/v1/users/" + enc(user.id) + "/sessions"), "Every session revoked."),
              }, "Revoke every session")));
            }

            nodes.push(h("h2", {}, "Custom claims"));
            const claimsText = JSON.stringify(user.claims || {}, null, 2);
            if (canWrite()) {
              const editor = h("textarea", { id: "claims-editor", name: "claims", spellcheck: "false", "aria-describedby": "claims-help claims-error" },
                claimsText);
              const form = h("form", { id: "claims-form" },
                h("label", { for: "claims-editor" }, "Custom claims (a JSON object; {} removes them)"),
                h("p", { id: "claims-help", class: "help" }, "The next access token minted for this user carries them."),
                editor, alertBox("claims-error"), h("button", { type: "submit" }, "Save claims"));
              form.addEventListener("submit", async (event) => {
                event.preventDefault();
                $("claims-error").textContent = "";
                try {
                  await api("PUT", "/admin/v1/users/" + enc(user.id) + "/claims", editor.value);
                  await reload("Claims saved.");
                } catch (error) {
                  $("claims-error").textContent = "The server refused the claims (" + error.code + "): " + error.message;
                  editor.focus();
                }
              });
              nodes.push(form);
            } else {
              nodes.push(h("pre", { id: "claims", "aria-label": "Custom claims" }, claimsText));
            }

            nodes.push(h("h2", {}, "Audit trail"),
              table("Audit trail", ["Time", "Event", "Detail"], audit.events.map((event) => [when(event.at), event.type, event.detail || "—"]),
                "No event yet."),
              audit.nextCursor ? h("p", {}, h("a", { href: "#/audit?userId=" + enc(user.id) }, "The whole trail in the audit log")) : null);

            if (canWrite()) {
              const disabled = Boolean(user.disabledAt);
              nodes.push(h("h2", {}, "Account"),
                h("p", {}, disabled ? "Enabling lets the user sign in again." : "Disabling ends every session; the user cannot sign in until enabled."),
                h("p", {}, h("button", {
                  type: "button", id: disabled ? "enable-user" : "disable-user", class: disabled ? "secondary" : "danger",
                  onclick: act(() => api("POST", "/admin/v1/users/" + enc(user.id) + (disabled ? "/enable" : "/disable")),
                    disabled ? "User enabled." : "User disabled; their sessions ended."),
                }, disabled ? "Enable this user" : "Disable this user")));
              const confirm = h("input", { id: "delete-confirm", autocomplete: "off", spellcheck: "false", "aria-describedby": "delete-help" });
              const remove = h("button", { type: "submit", class: "danger", id: "delete-user", disabled: true }, "Delete this user");
              confirm.addEventListener("input", () => { remove.disabled = confirm.value.trim() !== user.id; });
              const form = h("form", { id: "delete-form" },
                h("fieldset", {},
                  h("legend", {}, "Delete this user"),
                  h("p", { id: "delete-help" }, "Deleting removes the user, their identities and sessions, and revokes what their providers granted. "
                    + "It cannot be undone. Type the user id, " + user.id + ", to confirm."),
                  h("label", { for: "delete-confirm" }, "User id to confirm"), confirm, " ", remove, alertBox("delete-error")));
              form.addEventListener("submit", async (event) => {
                event.preventDefault();
                if (confirm.value.trim() !== user.id) { return; }
                try {
                  await api("DELETE", "/admin/v1/users/" + enc(user.id));
                  pending = "User " + user.id + " deleted.";
                  go("#/users");
                } catch (error) {
                  $("delete-error").textContent = "Refused: " + error.message;
                }
              });
              nodes.push(form);
            }
            return { title: "User " + user.id, nodes };
          }

          function deliveryRows(deliveries) {
            return deliveries.map((delivery) => {
              const cells = [h("a", { href: "#/deliveries/" + enc(delivery.id) }, delivery.id), delivery.type, delivery.endpoint, delivery.status,
                String(delivery.attempts), delivery.lastError || "—", when(delivery.createdAt)];
              if (canWrite()) {
                cells.push(delivery.status === "failed" ? h("button", {
                  type: "button", class: "secondary", "data-delivery": delivery.id, "aria-label": "Retry delivery " + delivery.id,
                  onclick: async () => {
                    try {
                      await api("POST", "/admin/v1/webhooks/deliveries/" + enc(delivery.id) + "/retry");
                      await route();
                      say("Delivery " + delivery.id + " is due again.");
                    } catch (error) { say("Refused: " + error.message); }
                  },
                }, "Retry") : "—");
              }
              return cells;
            });
          }

          async function deliveriesPage() {
            const [failed, latest] = await Promise.all([
              api("GET", "/admin/v1/webhooks/deliveries?status=failed&limit=100"),
              api("GET", "/admin/v1/webhooks/deliveries?limit=100"),
            ]);
            const columns = ["Delivery", "Event", "Endpoint", "Status", "Attempts", "Last error", "Created"].concat(canWrite() ? ["Action"] : []);
            return {
              title: "Webhook deliveries",
              nodes: [
                h("h1", { tabindex: "-1" }, "Webhook deliveries"),
                h("p", {}, "Each event is sent to each endpoint until it answers 2xx; after its retries a delivery fails. Failed ones come first."),
                h("h2", { id: "failed" }, "Failed"),
                table("Failed deliveries", columns, deliveryRows(failed.deliveries), "No failed delivery."),
                h("h2", { id: "others" }, "Pending and delivered"),
                table("Pending and delivered deliveries", columns, deliveryRows(latest.deliveries.filter((delivery) => delivery.status !== "failed")),
                  "No other delivery."),
              ],
            };
          }

          async function deliveryPage(id) {
            const delivery = await api("GET", "/admin/v1/webhooks/deliveries/" + enc(id));
            return {
              title: "Delivery " + delivery.id,
              nodes: [
                h("p", {}, h("a", { href: "#/deliveries" }, "← Webhook deliveries")),
                h("h1", { tabindex: "-1" }, "Delivery " + delivery.id),
                h("dl", {},
                  h("dt", {}, "Event"), h("dd", {}, delivery.type),
                  h("dt", {}, "webhook-id"), h("dd", {}, h("code", {}, delivery.webhookId)),
                  h("dt", {}, "Endpoint"), h("dd", {}, delivery.endpoint),
                  h("dt", {}, "Status"), h("dd", { id: "delivery-status" }, delivery.status),
                  h("dt", {}, "Attempts"), h("dd", {}, String(delivery.attempts)),
                  h("dt", {}, "Last error"), h("dd", {}, delivery.lastError || "—"),
                  h("dt", {}, "Next attempt"), h("dd", {}, when(delivery.nextAttemptAt)),
                  h("dt", {}, "Created"), h("dd", {}, when(delivery.createdAt)),
                  h("dt", {}, "Finished"), h("dd", {}, when(delivery.finishedAt)),
                  h("dt", {}, "User"), h("dd", {}, delivery.userId ? h("a", { href: "#/users/" + enc(delivery.userId) }, delivery.userId) : "—")),
                canWrite() && delivery.status === "failed" ? h("p", {}, h("button", {
                  type: "button", id: "retry-delivery",
                  onclick: async () => {
                    try {
                      await api("POST", "/admin/v1/webhooks/deliveries/" + enc(delivery.id) + "/retry");
                      await route();
                      say("Delivery " + delivery.id + " is due again.");
                    } catch (error) { say("Refused: " + error.message); }
                  },
                }, "Retry this delivery")) : null,
                h("h2", {}, "Payload"),
                h("p", {}, "The event exactly as it is sent. It holds no secret: each attempt is signed in its headers with the endpoint's secret, "
                  + "which is not stored with it."),
                h("pre", { id: "payload", tabindex: "0", "aria-label": "Payload" }, JSON.stringify(delivery.payload, null, 2)),
              ],
            };
          }

          function localInput(iso) {
            if (!iso) { return ""; }
            const date = new Date(iso);
            if (Number.isNaN(date.getTime())) { return ""; }
            return new Date(date.getTime() - date.getTimezoneOffset() * 60000).toISOString().slice(0, 16);
          }

          async function auditPage(query) {
            const filters = h("form", { id: "audit-filters", role: "search", "aria-label": "Filter the audit log" },
              h("div", { class: "fields" },
                field("audit-type", "Event type", query.get("type"), { autocomplete: "off", spellcheck: "false", list: "audit-types" }),
                field("audit-user", "User id", query.get("userId"), { autocomplete: "off", spellcheck: "false" }),
                field("audit-since", "Since (your local time)", localInput(query.get("since")), { type: "datetime-local" }),
                h("button", { type: "submit" }, "Filter"),
                h("button", { type: "button", class: "secondary", onclick: () => go("#/audit") }, "Clear")),
              h("datalist", { id: "audit-types" }, ["user_created", "sign_in", "session_revoked", "admin_claims_set", "admin_session_revoked",
                "admin_user_disabled", "admin_user_deleted", "admin_delivery_retried", "admin_signing_key_rotated", "admin_console_signed_in"]
                .map((name) => h("option", { value: name }))));
            filters.addEventListener("submit", (event) => {
              event.preventDefault();
              const next = new URLSearchParams();
              if ($("audit-type").value.trim()) { next.set("type", $("audit-type").value.trim()); }
              if ($("audit-user").value.trim()) { next.set("userId", $("audit-user").value.trim()); }
              if ($("audit-since").value) { next.set("since", new Date($("audit-since").value).toISOString()); }
              go("#/audit" + (next.toString() ? "?" + next : ""));
            });
            const request = new URLSearchParams({ limit: "50" });
            for (const name of ["type", "userId", "since", "cursor"]) { if (query.get(name)) { request.set(name, query.get(name)); } }
            const list = await api("GET", "/admin/v1/audit?" + request);
            const next = new URLSearchParams(query);
            if (list.nextCursor) { next.set("cursor", list.nextCursor); }
            return {
              title: "Audit log",
              nodes: [
                h("h1", { tabindex: "-1" }, "Audit log"), filters,
                h("h2", {}, "Events, newest first"),
                table("Audit events", ["Time", "Event", "User", "Detail"], list.events.map((event) => [
                  when(event.at), event.type, event.userId ? h("a", { href: "#/users/" + enc(event.userId) }, event.userId) : "—", event.detail || "—",
                ]), "No event matches."),
                list.nextCursor
                  ? h("nav", { "aria-label": "Pages", class: "paging" }, h("a", { href: "#/audit?" + next, id: "next-page" }, "Older events")) : null,
              ],
            };
          }

          async function keysPage() {
            const list = await api("GET", "/admin/v1/keys");
            const nodes = [
              h("h1", { tabindex: "-1" }, "Signing keys"),
              h("p", {}, "The keys that sign access tokens. The key material never leaves the server; /.well-known/jwks.json publishes the public keys."),
              table("Signing keys", ["Key id (kid)", "Algorithm", "State", "Created", "Retires after"],
                list.keys.map((key) => [h("code", {}, key.kid), key.algorithm, key.state, when(key.createdAt), when(key.retireAfter)]), "No key."),
            ];
            if (canWrite()) {
              const panel = h("div", { id: "rotate-confirm", class: "confirm", hidden: true, role: "group", "aria-labelledby": "rotate-question" },
                h("p", { id: "rotate-question" }, "Rotate now? A new key is published at once and signs once every instance has loaded it; "
                  + "the active key stops signing then and keeps verifying until the tokens it signed have expired."),
                h("button", { type: "button", id: "rotate-now", class: "danger", onclick: async () => {
                  try {
                    const rotation = await api("POST", "/admin/v1/keys/rotate");
                    await route();
                    say("New active key " + rotation.kid + "; it signs from " + when(rotation.signsFrom) + ".");
                  } catch (error) { say("Refused: " + error.message); }
                } }, "Rotate now"), " ",
                h("button", { type: "button", class: "secondary", id: "rotate-cancel", onclick: () => { panel.hidden = true; $("rotate").focus(); } },
                  "Cancel"));
              nodes.push(h("h2", {}, "Rotate"),
                h("p", {}, h("button", { type: "button", id: "rotate", onclick: () => { panel.hidden = false; $("rotate-now").focus(); } },
                  "Rotate the signing key…")), panel);
            }
            return { title: "Signing keys", nodes };
          }

          async function findingsPage() {
            const list = await api("GET", "/admin/v1/findings");
            const label = { ok: "OK", warning: "Warning", error: "Error" };
            const order = { error: 0, warning: 1, ok: 2 };
            const findings = list.findings.slice().sort((a, b) => order[a.status] - order[b.status]);
            return {
              title: "Set-up findings",
              nodes: [
                h("h1", { tabindex: "-1" }, "Set-up findings"),
                h("p", { id: "findings-summary" }, list.errors + " error(s), " + list.warnings + " warning(s). What ", h("code", {}, "latchkey doctor"),
                  " finds that the running server can tell; ", h("code", {}, "latchkey doctor --live"), " also asks the providers."),
                table("Findings", ["Status", "Check", "Finding", "Fix"], findings.map((finding) => [
                  h("span", { class: "status-" + finding.status }, label[finding.status] || finding.status), h("code", { class: "nowrap" }, finding.check), finding.message,
                  finding.fix || "—",
                ]), "No finding."),
              ],
            };
          }

          const routes = [
            [/^#\/users\/([^/?]+)$/, (m) => userPage(decodeURIComponent(m[1])), "users"],
            [/^#\/users(?:\?(.*))?$/, (m) => usersPage(new URLSearchParams(m[1] || "")), "users"],
            [/^#\/deliveries\/([^/?]+)$/, (m) => deliveryPage(decodeURIComponent(m[1])), "deliveries"],
            [/^#\/deliveries$/, () => deliveriesPage(), "deliveries"],
            [/^#\/audit(?:\?(.*))?$/, (m) => auditPage(new URLSearchParams(m[1] || "")), "audit"],
            [/^#\/keys$/, () => keysPage(), "keys"],
            [/^#\/findings$/, () => findingsPage(), "findings"],
          ];

          async function route() {
            if (session === null) { return; }
            const hash = location.hash.startsWith("#/") ? location.hash : "#/users";
            const turn = ++rendering;
            const match = routes.map(([pattern, page, section]) => [hash.match(pattern), page, section]).find(([found]) => found);
            for (const link of document.querySelectorAll("#nav a")) {
              if (match && link.dataset.section === match[2]) { link.setAttribute("aria-current", "page"); } else { link.removeAttribute("aria-current"); }
            }
            let page;
            $("view").setAttribute("aria-busy", "true");
            try {
              page = match ? await match[1](match[0]) : { title: "Not found", nodes: [h("h1", { tabindex: "-1" }, "No such page")] };
            } catch (error) {
              if (session === null) { return; }
              page = { title: "Error", nodes: failure(error) };
            }
            if (turn !== rendering || session === null) { return; }
            $("view").removeAttribute("aria-busy");
            $("view").replaceChildren(...page.nodes.flat().filter(Boolean));
            $("view").dataset.rendered = hash;
            document.title = page.title + " — Latchkey admin";
            const heading = $("view").querySelector("h1");
            if (heading) { heading.focus({ preventScroll: true }); }
          }

          // The skip link moves focus; as a hash it would be taken for a page.
          document.querySelector(".skip").addEventListener("click", (event) => {
            event.preventDefault();
            $("main").focus();
          });

          window.addEventListener("hashchange", () => {
            if (!location.hash.startsWith("#/")) { return; }
            say(pending);
            pending = "";
            route();
          });

          fetch("/admin/session", { credentials: "same-origin", headers: { Accept: "application/json" } })
            .then((response) => (response.ok ? response.json() : null))
            .then((answer) => {
              if (!answer) { showSignIn(""); return; }
              session = answer;
              showConsole();
              route();
            }, () => showSignIn("The server cannot be reached."));
        })();
        """#
}
