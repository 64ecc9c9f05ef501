import Foundation

/// The OpenAPI 3.1 description of ``LatchkeyServer/routes``.
enum OpenAPIDocument {
    private static var error: [String: Any] { ["$ref": "#/components/schemas/Error"] }

    private static func response(_ description: String, schema: [String: Any]? = nil) -> [String: Any] {
        var response: [String: Any] = ["description": description]
        if let schema { response["content"] = ["application/json": ["schema": schema]] }
        return response
    }

    private static func errors(_ codes: [Int]) -> [String: Any] {
        Dictionary(uniqueKeysWithValues: codes.map { (String($0), response("Error", schema: error) as Any) })
    }

    private static var bearer: [[String: [String]]] { [["bearer": []]] }

    /// Per route: summary, whether it needs a bearer token, request body schema, success status and schema, error statuses.
    private static var operations: [String: (summary: String, bearer: Bool, body: [String: Any]?, status: Int, schema: [String: Any]?, errors: [Int])] { [
        "POST /v1/auth/apple": ("Exchange a Sign in with Apple result for a Latchkey session", false, ["$ref": "#/components/schemas/AppleSignIn"], 200, ["$ref": "#/components/schemas/SignIn"], [400, 401, 413, 429, 502, 503]),
        "POST /v1/token": ("Rotate a refresh token (grant_type=refresh_token; form or JSON)", false, ["$ref": "#/components/schemas/RefreshRequest"], 200, ["$ref": "#/components/schemas/TokenPair"], [400, 413, 429, 503]),
        "POST /v1/logout": ("End this session, or every session with {\"all\": true}", true, ["type": "object", "properties": ["all": ["type": "boolean"]]], 200, ["type": "object"], [400, 401]),
        "GET /v1/me": ("The signed-in user and their identities", true, nil, 200, ["$ref": "#/components/schemas/User"], [401]),
        "DELETE /v1/me": ("Delete the account: revoke Apple's token, then delete everything", true, nil, 200, ["type": "object"], [401]),
        "GET /v1/me/sessions": ("The user's active sessions", true, nil, 200, ["type": "object"], [401]),
        "DELETE /v1/me/sessions/{id}": ("End one of the user's sessions", true, nil, 204, nil, [401, 404]),
        "POST /v1/apple/notifications": ("Apple's server-to-server notifications ({\"payload\": JWT})", false, ["type": "object", "properties": ["payload": ["type": "string"]], "required": ["payload"]], 200, ["type": "object"], [400, 401, 503]),
        "GET /.well-known/jwks.json": ("Public keys that verify Latchkey access tokens", false, nil, 200, ["type": "object"], []),
        "GET /.well-known/openid-configuration": ("Issuer metadata", false, nil, 200, ["type": "object"], []),
        "GET /healthz": ("Liveness", false, nil, 200, ["type": "object"], []),
        "GET /readyz": ("Readiness: the database answers", false, nil, 200, ["type": "object"], [503]),
        "GET /metrics": ("Prometheus metrics", false, nil, 200, nil, []),
        "GET /openapi.json": ("This document", false, nil, 200, ["type": "object"], []),
    ] }

    static func document(serverURL: String) -> [String: Any] {
        var paths: [String: [String: Any]] = [:]
        for (method, path) in LatchkeyServer.routes {
            guard let operation = operations["\(method) \(path)"] else { continue }
            var entry: [String: Any] = [
                "summary": operation.summary,
                "responses": [String(operation.status): response("Success", schema: operation.schema)].merging(errors(operation.errors)) { first, _ in first },
            ]
            if operation.bearer { entry["security"] = bearer }
            if let body = operation.body { entry["requestBody"] = ["required": true, "content": ["application/json": ["schema": body]]] }
            if path.contains("{id}") { entry["parameters"] = [["name": "id", "in": "path", "required": true, "schema": ["type": "string"]]] }
            paths[path, default: [:]][method.lowercased()] = entry
        }
        let string: [String: Any] = ["type": "string"]
        let integer: [String: Any] = ["type": "integer"]
        let tokenPair: [String: Any] = [
            "type": "object", "required": ["accessToken", "tokenType", "expiresIn", "refreshToken"],
            "properties": ["accessToken": string, "tokenType": string, "expiresIn": integer, "refreshToken": string],
        ]
        return [
            "openapi": "3.1.0",
            "info": ["title": "Latchkey", "version": "0.1.0", "description": "Sign in with Apple for apps with their own backend."],
            "servers": [["url": serverURL]],
            "paths": paths,
            "components": [
                "securitySchemes": ["bearer": ["type": "http", "scheme": "bearer", "bearerFormat": "JWT (at+jwt, ES256)"]],
                "schemas": [
                    "Error": ["type": "object", "required": ["error"], "properties": ["error": string, "error_description": string]],
                    "TokenPair": tokenPair,
                    "RefreshRequest": ["type": "object", "required": ["grant_type", "refresh_token"], "properties": ["grant_type": ["const": "refresh_token"], "refresh_token": string]],
                    "AppleSignIn": [
                        "type": "object", "required": ["identityToken"],
                        "properties": [
                            "identityToken": string, "authorizationCode": string, "rawNonce": string,
                            "fullName": ["type": "object", "properties": ["givenName": string, "familyName": string]],
                        ],
                    ],
                    "User": ["type": "object", "properties": ["id": string, "email": string, "givenName": string, "familyName": string, "identities": ["type": "array"]]],
                    "SignIn": ["allOf": [tokenPair, ["type": "object", "properties": ["user": ["$ref": "#/components/schemas/User"], "isNewUser": ["type": "boolean"]]]]],
                ],
            ],
        ]
    }

    static func json(serverURL: String) -> [UInt8] {
        Array((try? JSONSerialization.data(withJSONObject: document(serverURL: serverURL), options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data())
    }
}
