import Foundation

/// The OpenAPI 3.1 description of ``LatchkeyServer/routes``: every operation with the statuses, headers and
/// bodies the server really answers, strict schemas, and an example for every schema, request and response.
///
/// The wire types in LatchkeyModels are the source of truth for the bodies. `OpenAPIContractTests` holds this
/// document to them (every example decodes into its type and re-encodes unchanged; every schema lists exactly
/// the type's members) and to the running server (every answer's status, media type and body are documented);
/// `tests/contract/run.sh` runs schemathesis against `latchkey serve --dev` with it.
enum OpenAPIDocument {
    static func json(serverURL: String) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array((try? encoder.encode(document(serverURL: serverURL))) ?? Data("{}".utf8))
    }

    static func document(serverURL: String) -> JSON {
        var paths: [String: JSON] = [:]
        for (method, path) in LatchkeyServer.routes {
            guard let operation = operations["\(method) \(path)"] else { continue }
            paths[path] = (paths[path] ?? [:]).merging([method.lowercased(): operation])
        }
        return [
            "openapi": "3.1.0",
            "info": [
                "title": "Latchkey", "version": "0.1.0",
                "description": """
                Sign in with Apple for apps with their own backend. Every error answers \
                {"error": "<snake_case code>", "error_description": "<for people>"} (RFC 6749 §5.2 shape); \
                unknown paths and methods answer 404 `not_found`.
                """,
            ],
            "servers": [["url": .string(serverURL)]],
            "paths": .object(paths),
            "components": [
                "securitySchemes": ["bearer": ["type": "http", "scheme": "bearer", "bearerFormat": "JWT (typ at+jwt, ES256)"]], "schemas": .object(schemas),
            ],
        ]
    }

    // MARK: - Operations

    /// Per route (`METHOD path`, as in ``LatchkeyServer/routes``), its operation object.
    static var operations: [String: JSON] {
        [
            "POST /v1/auth/apple": signInWithApple,
            "POST /v1/auth/{provider}": signInWithProvider,
            "POST /v1/me/identities/{provider}": linkIdentity,
            "DELETE /v1/me/identities/{provider}/{subject}": unlinkIdentity,
            "POST /v1/token": refreshToken,
            "POST /v1/logout": logout,
            "GET /v1/me": me,
            "DELETE /v1/me": deleteMe,
            "GET /v1/me/sessions": listSessions,
            "DELETE /v1/me/sessions/{id}": endSession,
            "POST /v1/apple/notifications": appleNotification,
            "GET /.well-known/jwks.json": jwks,
            "GET /.well-known/openid-configuration": discovery,
            "GET /healthz": health,
            "GET /readyz": ready,
            "GET /metrics": metrics,
            "GET /openapi.json": openAPI,
            "GET /oauth2/authorize": authorize,
            "GET /oauth2/callback/{provider}": providerCallback(post: false),
            "POST /oauth2/callback/{provider}": providerCallback(post: true),
            "POST /oauth2/token": oauthToken,
            "POST /oauth2/revoke": revoke,
            "GET /.well-known/oauth-authorization-server": authorizationServerMetadata,
        ]
    }

    // MARK: - The browser flow

    private static func query(_ name: String, _ description: String, required: Bool = false, schema: JSON = nonEmptyString) -> JSON {
        ["name": .string(name), "in": "query", "required": .bool(required), "description": .string(description), "schema": schema]
    }

    private static func html(_ example: String) -> JSON { ["text/html": ["schema": ["type": "string"], "example": .string(example)]] }

    private static let stateMismatchPage = html("<!doctype html>…<h1>This sign-in cannot be finished</h1>…(state mismatch)…")

    private static func redirect(_ description: String) -> JSON {
        [
            "description": .string(description),
            "headers": ["Location": ["required": true, "description": "Where the browser goes next", "schema": ["type": "string", "minLength": 1]]],
        ]
    }

    private static var authorize: JSON {
        operation(
            id: "authorize", summary: "Start a browser sign-in (OAuth 2.1 authorization code with PKCE S256)",
            description: """
                Validates the client and its exact redirect URI; errors up to there are shown as a page, never redirected (RFC 9700). \
                Later errors go back to the redirect URI with `error`, `error_description`, `state` and `iss`. Without `provider` \
                the answer is a page listing the providers the client may use; with it, the browser goes to the provider. The \
                provider's answer arrives at /oauth2/callback/{provider}, which redirects to the app with a single-use `code`, \
                the app's `state` and `iss` (RFC 9207).
                """,
            parameters: [
                query("response_type", "Must be code", required: true, schema: ["type": "string", "enum": ["code"]]),
                query("client_id", "A registered client (clients[] in the configuration)", required: true),
                query("redirect_uri", "One of the client's redirect URIs, exactly (a loopback http URI matches any port)", required: true),
                query(
                    "code_challenge", "BASE64URL(SHA-256(code_verifier)) (RFC 7636)", required: true,
                    schema: ["type": "string", "pattern": "^[A-Za-z0-9_-]{43}$"]),
                query("code_challenge_method", "Must be S256", required: true, schema: ["type": "string", "enum": ["S256"]]),
                query("state", "Returned to the app unchanged; required", required: true, schema: ["type": "string", "minLength": 1, "maxLength": 1024]),
                query("provider", "apple, google, microsoft, dropbox or a generic OpenID Connect provider's name; omitted, a chooser page is shown"),
                query("invite_code", "Needed for a new user while signup.mode is invite"),
            ],
            responses: [
                "200": [
                    "description": "The provider chooser page",
                    "content": html(#"<!doctype html>…<a class="button" href="/oauth2/authorize?…&amp;provider=apple">Continue with Apple</a>…"#),
                ],
                "303": redirect("To the provider's sign-in page, or back to the app's redirect URI with an error"),
                "400": [
                    "description": "The client, redirect URI or query cannot be trusted: shown, not redirected",
                    "content": html("<!doctype html>…<h1>Unknown redirect URI</h1>…"),
                ],
                "429": rateLimited, "503": unavailable("The database is unavailable"),
            ])
    }

    private static func providerCallback(post: Bool) -> JSON {
        let fields: [String: JSON] = [
            "state": string, "code": string, "id_token": string, "user": string, "error": string, "error_description": string, "iss": string,
            "scope": string,
        ]
        let description = """
            Where the provider sends the user back. The sign-in in progress is found by `state` (single use, 10 minutes), not by a cookie: \
            Apple's form_post is a cross-site POST that carries no SameSite=Lax cookie. The user is found or created as the native \
            endpoints do, and the browser goes back to the app with a code.
            """
        if post {
            return operation(
                id: "providerCallbackPost", summary: "A provider's form_post answer (Sign in with Apple on the web)", description: description,
                parameters: [providerParameter],
                body: [
                    "required": true,
                    "content": [
                        "application/x-www-form-urlencoded": [
                            "schema": ["type": "object", "properties": .object(fields)],
                            "example": [
                                "state": "zB5OpgCugRw0AlyRxHL6D1IItiJ5B3H5WuOyO8J5UcQ",
                                "code": "c68eafb759bcc49d9b9620ee0e3de91ba.0.mxzs.gN4k953WIuRVUIqZ4LJl9A",
                            ],
                        ]
                    ],
                ],
                responses: [
                    "303": redirect("Back to the app's redirect URI with `code` or `error`, `state` and `iss`"),
                    "400": ["description": "No sign-in in progress has this state (or it was finished already)", "content": stateMismatchPage],
                    "413": tooLarge, "429": rateLimited, "503": unavailable("The database is unavailable"),
                ])
        }
        return operation(
            id: "providerCallback", summary: "A provider's answer in the query", description: description,
            parameters: [providerParameter] + ["state", "code", "error", "error_description", "iss", "scope"].map { query($0, "As the provider sent it") },
            responses: [
                "303": redirect("Back to the app's redirect URI with `code` or `error`, `state` and `iss`"),
                "400": [
                    "description": "No sign-in in progress has this state (or it was finished already), or the answer is malformed",
                    "content": stateMismatchPage,
                ],
                "429": rateLimited, "503": unavailable("The database is unavailable"),
            ])
    }

    private static var oauthToken: JSON {
        operation(
            id: "oauthToken", summary: "The token endpoint (RFC 6749 §3.2): redeem a code with its PKCE verifier, or rotate a refresh token",
            description: """
                Answers exactly RFC 6749 §5.1 and §5.2 (snake_case, `token_type`, `Cache-Control: no-store`). Public clients send \
                `client_id`; confidential clients authenticate with client_secret_basic or client_secret_post. A code works once, \
                within 60 s, for the client, redirect URI and code challenge it was issued to; a replayed code also ends the session \
                it started. Refresh tokens rotate as at /v1/token, for the client the session belongs to only.
                """,
            body: [
                "required": true,
                "content": [
                    "application/x-www-form-urlencoded": [
                        "schema": ref("OAuthTokenRequest"),
                        "examples": [
                            "code": ["summary": "Redeem a code", "value": Examples.oauthCode],
                            "refresh": ["summary": "Rotate a refresh token", "value": Examples.oauthRefresh],
                        ],
                    ]
                ],
            ],
            responses: [
                "200": ["description": "RFC 6749 §5.1 tokens", "content": jsonContent(ref("OAuthTokenResponse"), example: Examples.oauthTokens)],
                "400": error(
                    "A missing parameter, another grant type, or a code or refresh token that is unknown, used, expired, another client's, or whose verifier does not match",
                    codes: ["invalid_request", "unsupported_grant_type", "invalid_grant"], example: Examples.invalidGrant),
                "401": error(
                    "Client authentication failed", codes: ["invalid_client"], example: Examples.clientAuthenticationFailed,
                    headers: ["WWW-Authenticate": ["description": "Basic, when the client authenticated with it", "schema": string]]),
                "413": tooLarge, "429": rateLimited,
                "503": unavailable("The database is unavailable, or the session's provider has not confirmed it for too long"),
            ])
    }

    private static var revoke: JSON {
        operation(
            id: "revokeToken", summary: "Revoke a refresh or access token (RFC 7009): its session ends",
            description: "200 whether or not the token was valid or the client's, so nothing is learned about other tokens.",
            body: [
                "required": true,
                "content": [
                    "application/x-www-form-urlencoded": [
                        "schema": [
                            "type": "object", "required": ["token"],
                            "properties": ["token": nonEmptyString, "token_type_hint": string, "client_id": string, "client_secret": string],
                        ],
                        "example": ["token": .string(Examples.refreshToken), "token_type_hint": "refresh_token", "client_id": "com.example.app"],
                    ]
                ],
            ],
            responses: [
                "200": ["description": "Revoked, or nothing to revoke"],
                "400": error("token is missing", codes: ["invalid_request"], example: ["error": "invalid_request", "error_description": "token is missing"]),
                "401": error(
                    "Client authentication failed", codes: ["invalid_client"], example: Examples.clientAuthenticationFailed,
                    headers: ["WWW-Authenticate": ["description": "Basic, when the client authenticated with it", "schema": string]]),
                "413": tooLarge, "429": rateLimited, "503": unavailable("The database is unavailable"),
            ])
    }

    private static var authorizationServerMetadata: JSON {
        operation(
            id: "getAuthorizationServerMetadata", summary: "Authorization server metadata (RFC 8414); the same document as /.well-known/openid-configuration",
            responses: ["200": ["description": "The metadata", "content": jsonContent(ref("Discovery"), example: Examples.discovery)]])
    }

    private static var signInWithApple: JSON {
        let body = jsonContent(
            ref("AppleSignInRequest"),
            examples: [
                "native": ["summary": "An iOS sign-in (the name is shared on the first sign-in only)", "value": Examples.appleSignInNative],
                "web": ["summary": "A web sign-in: the code was obtained with this redirect URI", "value": Examples.appleSignInWeb],
            ])
        return operation(
            id: "signInWithApple", summary: "Exchange a Sign in with Apple result for a Latchkey session",
            description: """
                Verifies Apple's identity token (signature, issuer, audience, expiry, nonce; each token starts one session only), \
                redeems the authorization code at Apple when one is sent, and starts a session. `rawNonce` is the unhashed nonce \
                whose SHA-256 (lowercase hex) the app put in the request; it may be left out only where `apple.requireNonce` is off \
                and the token carries no nonce.
                """,
            body: ["required": true, "content": body],
            responses: [
                "200": [
                    "description": "Signed in", "content": jsonContent(ref("SignInResponse"), example: Examples.signIn),
                    "links": [
                        "RefreshSession": refreshLink("$response.body#/refreshToken", "Rotate the new session's refresh token")
                    ],
                ],
                "400": error(
                    "The body is not this JSON, `identityToken` is empty, `redirectUri` is not configured, or the code belongs to another Apple ID",
                    codes: ["invalid_request", "invalid_grant"], example: Examples.invalidBody),
                "401": error(
                    "Apple's identity token was refused; the code says which check failed", codes: identityTokenRefusals,
                    example: ["error": "nonce_mismatch", "error_description": "the token's nonce is not the SHA-256 of rawNonce"]),
                "413": tooLarge,
                "429": rateLimited,
                "502": error(
                    "Apple refused this server's own request (its client credentials or configuration): the operator's problem", codes: appleFailures,
                    example: Examples.invalidClient),
                "503": unavailable("Sign in with Apple is not configured, Apple or its keys cannot be reached, or the database is unavailable"),
            ]
        )
    }

    private static let providerParameter: JSON = [
        "name": "provider", "in": "path", "required": true,
        "description": "A configured provider: google, microsoft, facebook, dropbox, apple, or a generic OpenID Connect provider's name",
        "schema": ["type": "string", "minLength": 1], "example": "google",
    ]

    private static var providerBody: JSON {
        [
            "required": true,
            "content": jsonContent(
                ref("ProviderSignInRequest"),
                examples: [
                    "idToken": [
                        "summary": "An ID token from the provider's app SDK (Google, Microsoft, OpenID Connect, Facebook Limited Login)",
                        "value": Examples.providerIDToken,
                    ],
                    "code": [
                        "summary": "An authorization code with its PKCE verifier (Google, Microsoft, Dropbox, OpenID Connect)", "value": Examples.providerCode,
                    ],
                    "accessToken": ["summary": "A Facebook classic-login access token", "value": Examples.providerAccessToken],
                ]),
        ]
    }

    private static var signInWithProvider: JSON {
        operation(
            id: "signInWithProvider", summary: "Exchange a sign-in at any configured provider for a Latchkey session",
            description: """
                The body depends on the provider: `{idToken, rawNonce?}`, `{authorizationCode, codeVerifier, redirectUri}` (the server \
                redeems the code with PKCE) or `{accessToken}` (Facebook classic login, checked with debug_token). `/v1/auth/apple` \
                takes Apple's own body. Users are found by provider and subject, never by e-mail; each ID token starts one session only.
                """,
            parameters: [providerParameter], body: providerBody,
            responses: [
                "200": [
                    "description": "Signed in", "content": jsonContent(ref("SignInResponse"), example: Examples.signIn),
                    "links": ["RefreshSession": refreshLink("$response.body#/refreshToken", "Rotate the new session's refresh token")],
                ],
                "400": error(
                    "The body lacks what the provider needs, or the provider refused the code (unknown, used, wrong verifier or redirect URI)",
                    codes: ["invalid_request", "invalid_grant"], example: Examples.invalidBody),
                "401": error(
                    "The ID token or access token was refused; the code says which check failed", codes: identityTokenRefusals,
                    example: ["error": "unexpected_audience", "error_description": "the token is for another client id"]),
                "403": error(
                    "Sign-up needs an invitation (signup.mode is invite) and no valid inviteCode was sent", codes: ["signup_closed"],
                    example: ["error": "signup_closed", "error_description": "sign-up needs an invitation on this server"]),
                "404": error(
                    "No such provider is configured; the description lists the configured ones", codes: ["not_found"],
                    example: ["error": "not_found", "error_description": "no provider \"github\" is configured on this server; configured: apple, google"]),
                "413": tooLarge,
                "429": rateLimited,
                "502": error(
                    "The provider refused this server's own request (its client credentials or configuration)", codes: appleFailures,
                    example: Examples.invalidClient),
                "503": unavailable("The provider or its keys cannot be reached, or the database is unavailable"),
            ]
        )
    }

    private static var linkIdentity: JSON {
        operation(
            id: "linkIdentity", summary: "Link another provider account to the signed-in user",
            description:
                "Takes the same body as the provider's sign-in. An account already linked to another user is refused; nothing is ever linked by e-mail.",
            bearer: true,
            parameters: [providerParameter], body: providerBody,
            responses: [
                "200": ["description": "The user with the identity linked", "content": jsonContent(ref("UserResponse"), example: Examples.user)],
                "400": error(
                    "The body lacks what the provider needs, or the provider refused the code", codes: ["invalid_request", "invalid_grant"],
                    example: Examples.invalidBody),
                "401": error(
                    "No valid access token (invalid_token, with the bearer challenge), or the provider's token was refused (the code says which check failed)",
                    codes: ["invalid_token"] + identityTokenRefusals, example: Examples.invalidToken,
                    headers: [
                        "WWW-Authenticate": [
                            "required": false, "description": "The RFC 6750 challenge, when the access token is the problem",
                            "schema": ["type": "string", "pattern": "^Bearer"],
                        ]
                    ]),
                "404": error(
                    "No such provider is configured", codes: ["not_found"],
                    example: ["error": "not_found", "error_description": "no provider \"github\" is configured on this server; configured: apple, google"]),
                "409": error(
                    "The provider account is linked to another user", codes: ["identity_in_use"],
                    example: ["error": "identity_in_use", "error_description": "this google account is already linked to another user"]),
                "413": tooLarge,
                "429": rateLimited,
                "502": error("The provider refused this server's own request", codes: appleFailures, example: Examples.invalidClient),
                "503": unavailable("The provider or its keys cannot be reached, or the database is unavailable"),
            ]
        )
    }

    private static var unlinkIdentity: JSON {
        let subject: JSON = [
            "name": "subject", "in": "path", "required": true,
            "description": "The identity's subject, as GET /v1/me lists it, percent-encoded (`auth0%7C42` for `auth0|42`)",
            "schema": ["type": "string", "minLength": 1], "example": "108234567890123456789",
        ]
        return operation(
            id: "unlinkIdentity", summary: "Unlink one of the user's identities (never the last)",
            description:
                "Sessions begun through the identity end, and its provider grant is revoked (retried in the background when the provider cannot be reached).",
            bearer: true,
            parameters: [providerParameter, subject],
            responses: [
                "200": ["description": "The user without the identity", "content": jsonContent(ref("UserResponse"), example: Examples.user)],
                "400": error(
                    "The subject is not valid percent-encoded text (a malformed escape, a control character)", codes: ["invalid_request"],
                    example: ["error": "invalid_request", "error_description": "the path's subject is not valid percent-encoded text"]),
                "401": unauthorized,
                "404": error(
                    "The user has no such identity", codes: ["not_found"],
                    example: ["error": "not_found", "error_description": "no google identity with this subject is linked to this account"]),
                "409": error(
                    "It is the user's only identity", codes: ["last_identity"],
                    example: [
                        "error": "last_identity", "error_description": "this is the account's only identity; link another one first, or delete the account",
                    ]),
                "503": unavailable("The database is unavailable"),
            ]
        )
    }

    private static var refreshToken: JSON {
        let content: JSON = [
            "application/x-www-form-urlencoded": ["schema": ref("TokenRequestForm"), "example": Examples.refreshForm],
            "application/json": [
                "schema": ref("TokenRequest"),
                "examples": [
                    "snake_case": ["summary": "RFC 6749 member names", "value": Examples.refreshForm],
                    "camelCase": ["summary": "The app-facing member names", "value": Examples.refreshCamel],
                ],
            ],
        ]
        return operation(
            id: "refreshToken", summary: "Rotate a refresh token (app-facing, camelCase; not an RFC 6749 §5.1 token endpoint)",
            description: """
                The app-facing refresh endpoint. It takes RFC 6749 §6's `grant_type=refresh_token` request as a form, or as JSON \
                with snake_case or camelCase members, but answers Latchkey's camelCase token pair (`accessToken`, `tokenType`, \
                `expiresIn`, `refreshToken`), not RFC 6749 §5.1's `access_token`/`token_type`/`expires_in`/`refresh_token`. \
                The discovery document's `token_endpoint` is /oauth2/token, which does answer RFC 6749 §5.1. Each refresh token works once: \
                the answer carries its successor, and presenting a used one again (outside a short grace window) ends the session. \
                A token of a confidential browser-flow client's session is refused here: it refreshes at /oauth2/token, with its secret.
                """,
            body: ["required": true, "content": content],
            responses: [
                "200": [
                    "description": "The new token pair", "content": jsonContent(ref("TokenPairResponse"), example: Examples.tokenPair),
                    "links": [
                        "RotateAgain": refreshLink("$response.body#/refreshToken", "Rotate the successor")
                    ],
                ],
                "400": error(
                    "A missing or malformed field, another grant type, or a refresh token that is unknown, used, expired or revoked",
                    codes: ["invalid_request", "unsupported_grant_type", "invalid_grant"], example: Examples.invalidGrant),
                "413": tooLarge,
                "429": rateLimited,
                "503": unavailable("Apple has not confirmed the session's authorization for too long, or the database is unavailable"),
            ]
        )
    }

    private static var logout: JSON {
        operation(
            id: "logout", summary: "End this session, or every session of the user with {\"all\": true}", bearer: true,
            body: ["required": false, "content": jsonContent(ref("LogoutRequest"), example: Examples.logoutRequest)],
            responses: [
                "200": ["description": "How many sessions ended", "content": jsonContent(ref("LogoutResponse"), example: Examples.logoutResponse)],
                "400": error("The body is neither empty nor this JSON", codes: ["invalid_request"], example: Examples.invalidBody),
                "401": unauthorized,
                "413": tooLarge,
                "503": unavailable("The database is unavailable"),
            ]
        )
    }

    private static var me: JSON {
        operation(
            id: "getMe", summary: "The signed-in user and their identities", bearer: true,
            responses: [
                "200": ["description": "The user", "content": jsonContent(ref("UserResponse"), example: Examples.user)],
                "401": unauthorized,
                "503": unavailable("The database is unavailable"),
            ])
    }

    private static var deleteMe: JSON {
        operation(
            id: "deleteMe", summary: "Delete the account: revoke every provider's grant, then delete everything",
            description: "A revocation a provider does not take now is retried in the background; the account is deleted regardless.", bearer: true,
            responses: [
                "200": ["description": "The account is deleted", "content": jsonContent(ref("AccountDeletion"), example: Examples.accountDeletion)],
                "401": unauthorized,
                "503": unavailable("The database is unavailable"),
            ]
        )
    }

    private static var listSessions: JSON {
        operation(
            id: "listSessions", summary: "The user's active sessions", bearer: true,
            responses: [
                "200": [
                    "description": "The active sessions; `current` marks the caller's",
                    "content": jsonContent(ref("SessionList"), example: Examples.sessionList),
                    "links": [
                        "EndSession": [
                            "operationId": "endSession", "parameters": ["path.id": "$response.body#/sessions/0/id"],
                            "description": "End the first listed session",
                        ]
                    ],
                ],
                "401": unauthorized,
                "503": unavailable("The database is unavailable"),
            ])
    }

    private static var endSession: JSON {
        let id: JSON = [
            "name": "id", "in": "path", "required": true, "description": "A session id from GET /v1/me/sessions",
            "schema": ["type": "string", "minLength": 1], "example": .string(Examples.sessionID),
        ]
        return operation(
            id: "endSession", summary: "End one of the user's sessions", bearer: true, parameters: [id],
            responses: [
                "204": ["description": "The session is ended (also when it already was)"],
                "401": unauthorized,
                "404": error(
                    "The user has no session with this id", codes: ["not_found"],
                    example: ["error": "not_found", "error_description": "no session 3f0c7d1e-5b2a-4c8e-9f61-2d7a4b9e0c15 for this user"]),
                "503": unavailable("The database is unavailable"),
            ]
        )
    }

    private static var appleNotification: JSON {
        operation(
            id: "appleNotification", summary: "Apple's server-to-server notifications",
            description:
                "Apple posts {\"payload\": \"<JWT signed by Apple>\"} here; consent revocations and account deletions end the user's sessions. Each event is applied once.",
            body: ["required": true, "content": jsonContent(ref("AppleNotificationRequest"), example: Examples.notificationRequest)],
            responses: [
                "200": [
                    "description": "The notification was verified",
                    "content": jsonContent(ref("AppleNotificationResponse"), example: Examples.notificationResponse),
                ],
                "400": error(
                    "The body is not {\"payload\": \"<JWT>\"}", codes: ["invalid_request"],
                    example: ["error": "invalid_request", "error_description": "the body is not {\"payload\": \"<JWT>\"}"]),
                "401": error(
                    "The payload is not a valid notification signed by Apple for this app", codes: identityTokenRefusals,
                    example: ["error": "invalid_signature", "error_description": "the signature does not verify with Apple's key"]),
                "413": tooLarge,
                "503": unavailable("Sign in with Apple is not configured, Apple's keys cannot be fetched, or the database is unavailable"),
            ]
        )
    }

    private static var jwks: JSON {
        operation(
            id: "getJWKS", summary: "The public keys that verify Latchkey's access tokens",
            responses: [
                "200": ["description": "A JSON Web Key Set (RFC 7517)", "content": jsonContent(ref("JWKS"), example: Examples.jwks)]
            ])
    }

    private static var discovery: JSON {
        operation(
            id: "getDiscovery", summary: "Issuer metadata (RFC 8414 member names)",
            description:
                "What a backend needs to verify access tokens without a database (`jwks_uri`), and the browser flow's endpoints. The `token_endpoint` is /oauth2/token, which answers RFC 6749 §5.1; /v1/token is the app-facing camelCase endpoint.",
            responses: ["200": ["description": "The issuer metadata", "content": jsonContent(ref("Discovery"), example: Examples.discovery)]]
        )
    }

    private static var health: JSON {
        operation(
            id: "getHealth", summary: "Liveness",
            responses: [
                "200": ["description": "The process serves requests", "content": jsonContent(ref("Health"), example: ["status": "ok"])]
            ])
    }

    private static var ready: JSON {
        operation(
            id: "getReadiness", summary: "Readiness: the database answers",
            responses: [
                "200": ["description": "Ready", "content": jsonContent(ref("Ready"), example: ["status": "ready"])],
                "503": error(
                    "The database cannot be reached", codes: ["temporarily_unavailable"],
                    example: ["error": "temporarily_unavailable", "error_description": "the database cannot be reached"]),
            ])
    }

    private static var metrics: JSON {
        operation(
            id: "getMetrics", summary: "Prometheus metrics",
            responses: [
                "200": [
                    "description": "The Prometheus text exposition format",
                    "content": ["text/plain": ["schema": ["type": "string"], "example": .string(Examples.metrics)]],
                ]
            ])
    }

    private static var openAPI: JSON {
        operation(
            id: "getOpenAPI", summary: "This document",
            responses: [
                "200": ["description": "The OpenAPI 3.1 description of this server", "content": jsonContent(ref("OpenAPI"), example: Examples.openAPI)]
            ])
    }

    // MARK: - Building blocks

    private static func operation(
        id: String, summary: String, description: String? = nil, bearer: Bool = false, parameters: [JSON] = [], body: JSON? = nil, responses: [String: JSON]
    ) -> JSON {
        var operation: [String: JSON] = ["operationId": .string(id), "summary": .string(summary), "responses": .object(responses)]
        if let description { operation["description"] = .string(description) }
        if bearer { operation["security"] = [["bearer": []]] }
        if !parameters.isEmpty { operation["parameters"] = .array(parameters) }
        if let body { operation["requestBody"] = body }
        return .object(operation)
    }

    private static func jsonContent(_ schema: JSON, example: JSON) -> JSON {
        ["application/json": ["schema": schema, "example": example]]
    }

    private static func jsonContent(_ schema: JSON, examples: JSON) -> JSON {
        ["application/json": ["schema": schema, "examples": examples]]
    }

    private static func refreshLink(_ expression: String, _ description: String) -> JSON {
        [
            "operationId": "refreshToken", "requestBody": ["grant_type": "refresh_token", "refresh_token": .string(expression)],
            "description": .string(description),
        ]
    }

    static func ref(_ name: String) -> JSON { ["$ref": .string("#/components/schemas/\(name)")] }

    /// The error body with the codes this response may carry.
    private static func error(_ description: String, codes: [String], example: JSON, headers: [String: JSON] = [:]) -> JSON {
        var schema = errorSchema
        schema["properties"]?["error"] = ["type": "string", "enum": .array(codes.map { .string($0) })]
        var response: [String: JSON] = ["description": .string(description), "content": jsonContent(schema, example: example)]
        if !headers.isEmpty { response["headers"] = .object(headers) }
        return .object(response)
    }

    /// `error` is a stable snake_case code; `error_description` is for people and never contains a token or code.
    static let errorSchema: JSON = [
        "type": "object", "required": ["error", "error_description"], "additionalProperties": false,
        "properties": ["error": ["type": "string", "pattern": "^[a-z][a-z_]*$"], "error_description": ["type": "string"]],
    ]

    private static let retryAfter: JSON = ["description": "Seconds to wait before retrying", "schema": ["type": "integer", "minimum": 1]]

    private static var tooLarge: JSON {
        error(
            "The body is larger than the server takes (http.maxBodySize, 16 KiB by default)", codes: ["invalid_request"],
            example: ["error": "invalid_request", "error_description": "the request body is too large"])
    }

    private static var rateLimited: JSON {
        error(
            "Too many requests from this address, for this account or with this refresh token", codes: ["rate_limited"],
            example: ["error": "rate_limited", "error_description": "too many requests from this address; retry in 42 s"],
            headers: ["Retry-After": retryAfter.merging(["required": true])]
        )
    }

    private static var unauthorized: JSON {
        error(
            "No access token, or one that is invalid, expired or whose session has ended", codes: ["invalid_token"], example: Examples.invalidToken,
            headers: ["WWW-Authenticate": ["required": true, "description": "The RFC 6750 challenge", "schema": ["type": "string", "pattern": "^Bearer"]]]
        )
    }

    private static func unavailable(_ description: String) -> JSON {
        error(
            description, codes: ["temporarily_unavailable"],
            example: ["error": "temporarily_unavailable", "error_description": "the database is unavailable; try again shortly"],
            headers: ["Retry-After": retryAfter])
    }

    /// The codes of a refused Apple identity token or notification JWT.
    static let identityTokenRefusals = [
        "malformed_token", "token_too_large", "unsupported_algorithm", "unsupported_critical_header", "unknown_key_id", "invalid_signature",
        "missing_claim", "duplicate_claim", "invalid_claim", "unexpected_issuer", "unexpected_audience", "token_expired", "token_not_yet_valid",
        "issued_in_future", "nonce_missing", "nonce_mismatch", "nonce_required", "token_already_used", "code_hash_mismatch", "access_token_hash_mismatch",
    ]

    /// The codes of Apple refusing this server's own request, and of its own misconfiguration.
    static let appleFailures = [
        "invalid_client", "invalid_request", "unsupported_grant_type", "invalid_scope", "unauthorized_client", "invalid_provider_response",
        "invalid_configuration", "invalid_key",
    ]

    // MARK: - Schemas

    private static let string: JSON = ["type": "string"]
    private static let nonEmptyString: JSON = ["type": "string", "minLength": 1]
    private static let optionalString: JSON = ["type": ["string", "null"]]
    private static let dateTime: JSON = ["type": "string", "format": "date-time"]
    private static let identifier: JSON = ["type": "string", "pattern": "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"]
    private static let jwt: JSON = ["type": "string", "pattern": "^[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+$"]
    private static let count: JSON = ["type": "integer", "minimum": 0]

    /// An object schema. Answers are `closed` (exactly these members); requests stay open because the server ignores unknown members.
    private static func object(_ description: String, _ properties: [String: JSON], required: [String], closed: Bool, examples: [JSON]) -> JSON {
        var schema: [String: JSON] = [
            "type": "object", "description": .string(description), "properties": .object(properties), "required": .array(required.map { .string($0) }),
        ]
        if closed { schema["additionalProperties"] = false }
        if !examples.isEmpty { schema["examples"] = .array(examples) }
        return .object(schema)
    }

    /// An array of strings drawn from `values`.
    private static func strings(_ values: [String]) -> JSON { ["type": "array", "items": ["type": "string", "enum": .array(values.map { .string($0) })]] }

    private static var tokenPairProperties: [String: JSON] {
        [
            "accessToken": jwt.merging(["description": "A JWT (typ at+jwt, ES256) for `Authorization: Bearer`; verify it with /.well-known/jwks.json"]),
            "tokenType": ["type": "string", "enum": ["Bearer"]],
            "expiresIn": ["type": "integer", "minimum": 1, "description": "The access token's lifetime in seconds"],
            "refreshToken": ["type": "string", "pattern": "^lkr_[A-Za-z0-9_-]{43}$", "description": "Single use: POST it to /v1/token for the next pair"],
        ]
    }

    /// `snake ?? camel`, as the server reads the JSON refresh request: the camelCase member counts only when the snake_case one is absent or null.
    private static func eitherCase(_ snake: String, _ camel: String, _ value: JSON) -> JSON {
        [
            "anyOf": [
                ["required": [.string(snake)], "properties": [snake: value]],
                ["required": [.string(camel)], "properties": [snake: ["type": "null"], camel: value]],
            ]
        ]
    }

    static var schemas: [String: JSON] {
        [
            "Error": errorSchema.merging(["description": "Every error answer (RFC 6749 §5.2 shape)", "examples": [Examples.invalidGrant]]),
            "AppleSignInRequest": object(
                "What the app got from ASAuthorizationAppleIDCredential",
                [
                    "identityToken": nonEmptyString.merging(["description": "Apple's identity token (a JWT)"]),
                    "authorizationCode": optionalString.merging([
                        "description": "Apple's authorization code; redeemed so the account can be revoked at deletion"
                    ]),
                    "rawNonce": nonEmptyString.merging(["description": "The unhashed nonce; the token's nonce claim is its lowercase hex SHA-256"]),
                    "fullName": ["anyOf": [ref("FullName"), ["type": "null"]], "description": "The name iOS shares on the first sign-in only"],
                    "redirectUri": optionalString.merging([
                        "description": "Web sign-ins only: the redirect URI the code was obtained with; one of apple.redirectUris"
                    ]),
                    "inviteCode": optionalString.merging(["description": "Needed for a new user while signup.mode is invite"]),
                ], required: ["identityToken", "rawNonce"], closed: false, examples: [Examples.appleSignInNative, Examples.appleSignInWeb]
            ),
            "ProviderSignInRequest": object(
                "What the app got from the provider; which members a provider needs is in the operation's description",
                [
                    "idToken": optionalString.merging(["description": "An OpenID Connect ID token"]),
                    "rawNonce": optionalString.merging(["description": "The unhashed nonce, when the ID token carries one"]),
                    "authorizationCode": optionalString.merging(["description": "An authorization code for the server to redeem with PKCE"]),
                    "codeVerifier": optionalString.merging(["description": "The code's PKCE verifier (RFC 7636)"]),
                    "redirectUri": optionalString.merging(["description": "The redirect URI the code was issued to"]),
                    "accessToken": optionalString.merging(["description": "A Facebook classic-login access token"]),
                    "clientId": optionalString.merging(["description": "Which configured client id the code was issued to, when there are several"]),
                    "inviteCode": optionalString.merging(["description": "Needed for a new user while signup.mode is invite"]),
                ], required: [], closed: false, examples: [Examples.providerIDToken, Examples.providerCode, Examples.providerAccessToken]
            ),
            "FullName": object(
                "The user's name as Apple shares it", ["givenName": optionalString, "familyName": optionalString], required: [], closed: false,
                examples: [Examples.fullName]),
            "TokenRequestForm": object(
                "RFC 6749 §6 refresh request",
                [
                    "grant_type": ["type": "string", "enum": ["refresh_token"]],
                    "refresh_token": nonEmptyString,
                ], required: ["grant_type", "refresh_token"], closed: false, examples: [Examples.refreshForm]
            ),
            "TokenRequest": [
                "type": "object",
                "description":
                    "The refresh request as JSON, with snake_case or camelCase members; a camelCase member is read only when its snake_case twin is absent or null",
                "properties": ["grant_type": optionalString, "refresh_token": optionalString, "grantType": optionalString, "refreshToken": optionalString],
                "allOf": [
                    eitherCase("grant_type", "grantType", ["type": "string", "enum": ["refresh_token"]]),
                    eitherCase("refresh_token", "refreshToken", nonEmptyString),
                ],
                "examples": [Examples.refreshForm, Examples.refreshCamel],
            ],
            "TokenPairResponse": object(
                "A new token pair", tokenPairProperties, required: ["accessToken", "tokenType", "expiresIn", "refreshToken"], closed: true,
                examples: [Examples.tokenPair]),
            "SignInResponse": object(
                "A new session, its user, and whether the user was created by this sign-in",
                tokenPairProperties.merging(["user": ref("UserResponse"), "isNewUser": ["type": "boolean"]]) { first, _ in first },
                required: ["accessToken", "tokenType", "expiresIn", "refreshToken", "user", "isNewUser"], closed: true, examples: [Examples.signIn]
            ),
            "UserResponse": object(
                "A user",
                [
                    "id": identifier, "email": string, "emailVerified": ["type": "boolean"], "givenName": string, "familyName": string, "createdAt": dateTime,
                    "identities": ["type": "array", "items": ref("IdentityResponse")],
                ], required: ["id", "createdAt", "identities"], closed: true, examples: [Examples.user]
            ),
            "IdentityResponse": object(
                "A provider account linked to the user",
                [
                    "provider": nonEmptyString.merging(["description": "apple, google, microsoft, facebook, dropbox, or a generic provider's name"]),
                    "subject": nonEmptyString, "email": string, "isPrivateEmail": ["type": "boolean"],
                    "realUserStatus": [
                        "type": "integer", "enum": [0, 1, 2], "description": "Apple's real_user_status: 0 unsupported, 1 unknown, 2 likely real",
                    ],
                    "emailForwardingEnabled": ["type": "boolean"], "firstSeenAt": dateTime,
                ], required: ["provider", "subject", "firstSeenAt"], closed: true, examples: [Examples.identity]
            ),
            "SessionResponse": object(
                "A session (one signed-in device)",
                [
                    "id": identifier, "clientId": string, "createdAt": dateTime, "lastUsedAt": dateTime, "expiresAt": dateTime, "userAgent": string,
                    "current": ["type": "boolean", "description": "Whether this is the caller's session"],
                ], required: ["id", "clientId", "createdAt", "lastUsedAt", "expiresAt", "current"], closed: true, examples: [Examples.session]
            ),
            "SessionList": object(
                "The user's active sessions", ["sessions": ["type": "array", "items": ref("SessionResponse")]], required: ["sessions"], closed: true,
                examples: [Examples.sessionList]),
            "LogoutRequest": object(
                "An optional body; no body ends only this session", ["all": ["type": ["boolean", "null"], "description": "End every session of the user"]],
                required: [], closed: false, examples: [Examples.logoutRequest]),
            "LogoutResponse": object(
                "How many sessions ended", ["revokedSessions": count], required: ["revokedSessions"], closed: true, examples: [Examples.logoutResponse]),
            "AccountDeletion": object(
                "The account is deleted",
                [
                    "deleted": ["type": "integer", "enum": [1]],
                    "tokensRevoked": count.merging(["description": "Provider grants revoked now"]),
                    "revocationsPending": count.merging(["description": "Revocations a provider did not take now, retried in the background"]),
                    "appleTokensRevoked": count.merging(["description": "The same as tokensRevoked (its name predates other providers)"]),
                    "appleRevocationsPending": count.merging(["description": "The same as revocationsPending (its name predates other providers)"]),
                ], required: ["deleted", "tokensRevoked", "revocationsPending", "appleTokensRevoked", "appleRevocationsPending"], closed: true,
                examples: [Examples.accountDeletion]
            ),
            "AppleNotificationRequest": object(
                "Apple's notification envelope", ["payload": string.merging(["description": "A JWT signed by Apple"])], required: ["payload"], closed: false,
                examples: [Examples.notificationRequest]),
            "AppleNotificationResponse": object(
                "What the notification did", ["status": ["type": "string", "enum": ["processed", "duplicate", "unknownSubject"]]], required: ["status"],
                closed: true, examples: [Examples.notificationResponse]
            ),
            "JWKS": object(
                "A JSON Web Key Set",
                [
                    "keys": [
                        "type": "array",
                        "items": object(
                            "A P-256 public key",
                            [
                                "kty": ["type": "string", "enum": ["EC"]], "crv": ["type": "string", "enum": ["P-256"]], "kid": nonEmptyString,
                                "use": ["type": "string", "enum": ["sig"]], "alg": ["type": "string", "enum": ["ES256"]],
                                "x": ["type": "string", "pattern": "^[A-Za-z0-9_-]{43}$"], "y": ["type": "string", "pattern": "^[A-Za-z0-9_-]{43}$"],
                            ], required: ["kty", "crv", "kid", "use", "alg", "x", "y"], closed: true, examples: []
                        ),
                    ]
                ], required: ["keys"], closed: true, examples: [Examples.jwks]
            ),
            "Discovery": object(
                "Authorization server metadata (RFC 8414)",
                [
                    "issuer": nonEmptyString, "jwks_uri": nonEmptyString, "authorization_endpoint": nonEmptyString, "token_endpoint": nonEmptyString,
                    "revocation_endpoint": nonEmptyString, "response_types_supported": strings(["code"]), "response_modes_supported": strings(["query"]),
                    "grant_types_supported": strings(["authorization_code", "refresh_token"]), "code_challenge_methods_supported": strings(["S256"]),
                    "token_endpoint_auth_methods_supported": strings(["none", "client_secret_basic", "client_secret_post"]),
                    "revocation_endpoint_auth_methods_supported": strings(["none", "client_secret_basic", "client_secret_post"]),
                    "authorization_response_iss_parameter_supported": ["type": "boolean"],
                    "access_token_signing_alg_values_supported": strings(["ES256"]),
                ],
                required: [
                    "issuer", "jwks_uri", "authorization_endpoint", "token_endpoint", "revocation_endpoint", "response_types_supported",
                    "response_modes_supported", "grant_types_supported", "code_challenge_methods_supported", "token_endpoint_auth_methods_supported",
                    "revocation_endpoint_auth_methods_supported", "authorization_response_iss_parameter_supported",
                    "access_token_signing_alg_values_supported",
                ], closed: true, examples: [Examples.discovery]
            ),
            "OAuthTokenRequest": object(
                "RFC 6749 §4.1.3 and §6, form-encoded",
                [
                    "grant_type": ["type": "string", "enum": ["authorization_code", "refresh_token"]], "code": string, "redirect_uri": string,
                    "code_verifier": string, "refresh_token": string, "client_id": string, "client_secret": string,
                ], required: ["grant_type"], closed: false, examples: [Examples.oauthCode, Examples.oauthRefresh]
            ),
            "OAuthTokenResponse": object(
                "RFC 6749 §5.1",
                [
                    "access_token": jwt, "token_type": ["type": "string", "enum": ["Bearer"]], "expires_in": ["type": "integer", "minimum": 1],
                    "refresh_token": ["type": "string", "pattern": "^lkr_[A-Za-z0-9_-]{43}$"],
                ], required: ["access_token", "token_type", "expires_in", "refresh_token"], closed: true, examples: [Examples.oauthTokens]
            ),
            "Health": object("Liveness", ["status": ["type": "string", "enum": ["ok"]]], required: ["status"], closed: true, examples: [["status": "ok"]]),
            "Ready": object(
                "Readiness", ["status": ["type": "string", "enum": ["ready"]]], required: ["status"], closed: true, examples: [["status": "ready"]]),
            "OpenAPI": object(
                "An OpenAPI 3.1 document", ["openapi": ["type": "string", "enum": ["3.1.0"]], "info": ["type": "object"], "paths": ["type": "object"]],
                required: ["openapi", "info", "paths"], closed: false, examples: [Examples.openAPI]),
        ]
    }

    // MARK: - Examples

    /// One value per example; each appears in its schema and in the requests and answers that carry it.
    enum Examples {
        static let sessionID = "3f0c7d1e-5b2a-4c8e-9f61-2d7a4b9e0c15"
        static let accessToken =
            "eyJhbGciOiJFUzI1NiIsImtpZCI6ImtNN2NMS2xZa2IwVTUtejIiLCJ0eXAiOiJhdCtqd3QifQ.eyJzdWIiOiI5YjJlNGM2YS0xZDNmLTRhOGItOWM1ZS03ZjIxMGE0YjZjOGQifQ.c2lnbmF0dXJl"
        static let refreshToken = "lkr_99I-hp5c0uEQ-EPB6beKr1wYaQE9NrOhtWIEtj3iufs"
        static let identityToken = "eyJhbGciOiJSUzI1NiIsImtpZCI6IllxN2tKMFpQIn0.eyJpc3MiOiJodHRwczovL2FwcGxlaWQuYXBwbGUuY29tIn0.c2lnbmF0dXJl"

        static let fullName: JSON = ["givenName": "Jane", "familyName": "Appleseed"]
        static let appleSignInNative: JSON = [
            "identityToken": .string(identityToken), "authorizationCode": "c2f49cd1c47cfedae056352a51db51b07.0.whbf.74tf8YRQ4mhuN7c7cpx_W6",
            "rawNonce": "6d1a0f5e-3c2b-4e9a-8f7d-1b2c3d4e5f60", "fullName": fullName,
        ]
        static let appleSignInWeb: JSON = [
            "identityToken": .string(identityToken), "authorizationCode": "c8d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a.0.whbf.Q2x0ZW1wbGVjb2Rl",
            "rawNonce": "web-nonce-4f8a2c", "redirectUri": "https://app.example.com/callback",
        ]
        static let refreshForm: JSON = ["grant_type": "refresh_token", "refresh_token": .string(refreshToken)]
        static let refreshCamel: JSON = ["grantType": "refresh_token", "refreshToken": .string(refreshToken)]
        static let tokenPair: JSON = [
            "accessToken": .string(accessToken), "tokenType": "Bearer", "expiresIn": 600, "refreshToken": "lkr_Zm9vYmFyYmF6cXV4LW5leHQtdG9rZW4tcm90YXRlZC1",
        ]
        static let identity: JSON = [
            "provider": "apple", "subject": "001234.9f8e7d6c5b4a39281706f5e4d3c2b1a0.1234", "email": "jane@privaterelay.appleid.com",
            "isPrivateEmail": true, "realUserStatus": 2, "emailForwardingEnabled": true, "firstSeenAt": "2026-01-15T09:30:00Z",
        ]
        static let user: JSON = [
            "id": "9b2e4c6a-1d3f-4a8b-9c5e-7f210a4b6c8d", "email": "jane@privaterelay.appleid.com", "emailVerified": true,
            "givenName": "Jane", "familyName": "Appleseed", "createdAt": "2026-01-15T09:30:00Z", "identities": [identity],
        ]
        static let signIn: JSON = [
            "accessToken": .string(accessToken), "tokenType": "Bearer", "expiresIn": 600, "refreshToken": .string(refreshToken),
            "user": user, "isNewUser": true,
        ]
        static let session: JSON = [
            "id": .string(sessionID), "clientId": "com.example.app", "createdAt": "2026-01-15T09:30:00Z", "lastUsedAt": "2026-01-20T18:02:11Z",
            "expiresAt": "2026-07-14T09:30:00Z", "userAgent": "ExampleApp/1.4 CFNetwork/1490.0.4 Darwin/23.2.0", "current": true,
        ]
        static let sessionList: JSON = ["sessions": [session]]
        static let logoutRequest: JSON = ["all": true]
        static let logoutResponse: JSON = ["revokedSessions": 2]
        static let accountDeletion: JSON = [
            "deleted": 1, "tokensRevoked": 2, "revocationsPending": 0, "appleTokensRevoked": 2, "appleRevocationsPending": 0,
        ]
        static let providerIDToken: JSON = [
            "idToken": "eyJhbGciOiJSUzI1NiIsImtpZCI6IjFmMmUzZDRjIn0.eyJpc3MiOiJodHRwczovL2FjY291bnRzLmdvb2dsZS5jb20ifQ.c2lnbmF0dXJl",
            "rawNonce": "a3f9c1e07b5d4e6f",
        ]
        static let providerCode: JSON = [
            "authorizationCode": "4/0AeanS0b-example-code", "codeVerifier": "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk",
            "redirectUri": "com.example.app:/oauth2redirect",
        ]
        static let providerAccessToken: JSON = ["accessToken": "EAAGm0PX4ZCpsBA-example-token"]
        static let notificationRequest: JSON = [
            "payload": "eyJraWQiOiJZdXlYb1kiLCJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJodHRwczovL2FwcGxlaWQuYXBwbGUuY29tIn0.c2lnbmF0dXJl"
        ]
        static let notificationResponse: JSON = ["status": "processed"]
        static let jwks: JSON = [
            "keys": [
                [
                    "kty": "EC", "crv": "P-256", "kid": "kM7cLKlYkb0U5-z2", "use": "sig", "alg": "ES256",
                    "x": "QK6fri8OMIIhGiDnepzuCaiOx5U3VJbRfsHqG4abPGc", "y": "Wo6jaqx5iz4EsRvj47eqxfzjqdWtuTxSBCE9KgKHuH4",
                ]
            ]
        ]
        static let discovery: JSON = [
            "issuer": "https://auth.example.com", "jwks_uri": "https://auth.example.com/.well-known/jwks.json",
            "authorization_endpoint": "https://auth.example.com/oauth2/authorize", "token_endpoint": "https://auth.example.com/oauth2/token",
            "revocation_endpoint": "https://auth.example.com/oauth2/revoke", "response_types_supported": ["code"], "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code", "refresh_token"], "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none", "client_secret_basic", "client_secret_post"],
            "revocation_endpoint_auth_methods_supported": ["none", "client_secret_basic", "client_secret_post"],
            "authorization_response_iss_parameter_supported": true, "access_token_signing_alg_values_supported": ["ES256"],
        ]
        static let oauthCode: JSON = [
            "grant_type": "authorization_code", "code": "Hb5Rq0n2c2u1bW0mV4sLh5yq8m3WlVJgq3p0T0d8r9A", "redirect_uri": "com.example.app:/oauth2redirect",
            "code_verifier": "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk", "client_id": "com.example.app",
        ]
        static let oauthRefresh: JSON = ["grant_type": "refresh_token", "refresh_token": .string(refreshToken), "client_id": "com.example.app"]
        static let oauthTokens: JSON = [
            "access_token": .string(accessToken), "token_type": "Bearer", "expires_in": 600, "refresh_token": "lkr_Zm9vYmFyYmF6cXV4LW5leHQtdG9rZW4tcm90YXRlZC1",
        ]
        static let clientAuthenticationFailed: JSON = ["error": "invalid_client", "error_description": "client authentication failed"]
        static let openAPI: JSON = ["openapi": "3.1.0", "info": ["title": "Latchkey", "version": "0.1.0"], "paths": [:]]
        static let metrics = """
            # TYPE latchkey_http_requests_total counter
            latchkey_http_requests_total{route="/healthz",status="200"} 1

            """
        static let invalidBody: JSON = ["error": "invalid_request", "error_description": "the body is not the JSON this endpoint takes (see /openapi.json)"]
        static let invalidGrant: JSON = ["error": "invalid_grant", "error_description": "the refresh token is unknown or expired; sign in again"]
        static let invalidToken: JSON = ["error": "invalid_token", "error_description": "the access token expired; refresh it"]
        static let invalidClient: JSON = [
            "error": "invalid_client",
            "error_description": "Apple did not accept this server's client credentials; the operator should run `latchkey doctor --live`",
        ]
    }
}

extension OpenAPIDocument {
    /// A JSON value. Literals of it type-check quickly (unlike `[String: Any]`), and it is `Sendable`.
    enum JSON: Sendable, Encodable, Equatable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral, ExpressibleByArrayLiteral,
        ExpressibleByDictionaryLiteral
    {
        case string(String)
        case integer(Int)
        case bool(Bool)
        case array([JSON])
        case object([String: JSON])

        init(stringLiteral value: String) { self = .string(value) }
        init(integerLiteral value: Int) { self = .integer(value) }
        init(booleanLiteral value: Bool) { self = .bool(value) }
        init(arrayLiteral elements: JSON...) { self = .array(elements) }
        /// A key given twice is a mistake in the document, caught by its tests.
        init(dictionaryLiteral elements: (String, JSON)...) { self = .object(Dictionary(uniqueKeysWithValues: elements)) }

        /// An object with `other`'s members added; `other` must not repeat a member.
        func merging(_ other: JSON) -> JSON {
            guard case .object(let members) = self, case .object(let more) = other else { preconditionFailure("merging needs two objects") }
            return .object(members.merging(more) { _, _ in preconditionFailure("a member is given twice") })
        }

        subscript(key: String) -> JSON? {
            get {
                guard case .object(let members) = self else { return nil }
                return members[key]
            }
            set {
                guard case .object(var members) = self else { return }
                members[key] = newValue
                self = .object(members)
            }
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            switch self {
            case .string(let value): try container.encode(value)
            case .integer(let value): try container.encode(value)
            case .bool(let value): try container.encode(value)
            case .array(let value): try container.encode(value)
            case .object(let value): try container.encode(value)
            }
        }
    }
}
