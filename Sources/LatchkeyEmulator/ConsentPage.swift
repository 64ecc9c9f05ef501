import Foundation

/// The HTML the emulator shows where Apple (or another provider) would show its sign-in sheet.
enum ConsentPage {
    static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;").replacingOccurrences(of: "'", with: "&#39;")
    }

    static func hiddenFields(_ parameters: [String: String], skipping: Set<String> = []) -> String {
        parameters.sorted { $0.key < $1.key }.filter { !skipping.contains($0.key) }
            .map { #"<input type="hidden" name="\#(escape($0.key))" value="\#(escape($0.value))">"# }.joined(separator: "\n")
    }

    static func render(parameters: [String: String], provider: Emulator.Provider, action: String, suggestedEmail: String) -> String {
        let client = escape(parameters["client_id"] ?? "")
        let scopes = Set((parameters["scope"] ?? "").split(separator: " ").map(String.init))
        let title = "Sign in with \(provider.displayName) (Latchkey emulator)"
        let shares = [scopes.contains("name") || scopes.contains("profile") ? "your name" : nil, scopes.contains("email") ? "your e-mail address" : nil]
            .compactMap { $0 }.joined(separator: " and ")
        let hideChoice =
            provider == .apple && scopes.contains("email")
            ? #"<label><input type="checkbox" name="hide_my_email" value="on"> Hide My Email (share a relay address)</label>"#
            : ""
        return """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><title>\(title)</title>
            <style>body{font-family:-apple-system,system-ui,sans-serif;max-width:28rem;margin:3rem auto;padding:0 1rem}
            fieldset{border:1px solid #ccc;border-radius:.5rem;padding:1rem}label{display:block;margin:.5rem 0}
            input[type=email],input[type=text]{width:100%;padding:.4rem}button{margin:.5rem .5rem 0 0;padding:.5rem 1.2rem}</style></head>
            <body>
            <h1>\(title)</h1>
            <p>Sign in to <strong>\(client)</strong>\(shares.isEmpty ? "." : " and share \(shares).")</p>
            <form method="post" action="\(escape(action))">
            \(hiddenFields(parameters, skipping: ["email", "given_name", "family_name", "hide_my_email", "action"]))
            <fieldset>
            <label>Account e-mail <input type="email" name="email" value="\(escape(suggestedEmail))" placeholder="a new test user is created if empty"></label>
            <label>First name <input type="text" name="given_name"></label>
            <label>Last name <input type="text" name="family_name"></label>
            \(hideChoice)
            </fieldset>
            <button type="submit" name="action" value="continue">Continue</button>
            <button type="submit" name="action" value="cancel">Cancel</button>
            </form>
            </body></html>
            """
    }

    /// `response_mode=form_post`: a page that POSTs the answer to the redirect URI.
    static func formPost(_ fields: [(String, String)], to redirectURI: String) -> String {
        let inputs = fields.map { #"<input type="hidden" name="\#(escape($0.0))" value="\#(escape($0.1))">"# }.joined(separator: "\n")
        return """
            <!doctype html>
            <html><head><meta charset="utf-8"><title>Redirecting</title></head>
            <body onload="document.forms[0].submit()">
            <form method="post" action="\(escape(redirectURI))">
            \(inputs)
            <noscript><button type="submit">Continue</button></noscript>
            </form>
            </body></html>
            """
    }
}
