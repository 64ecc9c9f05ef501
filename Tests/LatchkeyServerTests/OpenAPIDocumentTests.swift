import Foundation
import Testing

@testable import LatchkeyServer

/// `openapi.yaml` is the one source of `/openapi.json`: it loads, the binary carries it as checked in, and the server
/// serves exactly it (with its own URL filled in), the same bytes every time. A document that does not parse, or gives
/// a key twice, fails here, with where, and never in a request.
@Suite("Server: the OpenAPI document as written")
struct OpenAPIDocumentTests {
    static let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appending(path: "Sources/LatchkeyServer/openapi.yaml")

    @Test("openapi.yaml loads, and the module carries it as checked in")
    func loads() throws {
        let text = try String(contentsOf: Self.file, encoding: .utf8)
        #expect(OpenAPIDocument.yaml == text, "the embedded openapi.yaml differs from the file: rebuild")
        let document = try OpenAPIDocument.document.get()
        guard case .object(let members) = document else {
            Issue.record("the document is not an object")
            return
        }
        #expect(members["openapi"] == .string("3.1.0"))
        #expect(try Value.parse(OpenAPIDocument.json(serverURL: "https://auth.example.com"))["servers"] == OpenAPI.servers("https://auth.example.com"))
    }

    @Test("the served JSON is openapi.yaml with the server's URL filled in, and every request gets the same bytes")
    func servedIsTheYAML() async throws {
        try await ServerHarness.with { harness in
            let first = try await harness.send("GET", "/openapi.json")
            let second = try await harness.send("GET", "/openapi.json")
            #expect(first.status == 200 && first.headers["content-type"] == "application/json")
            #expect(first.body == second.body, "two requests got different documents")

            let issuer = harness.server.configuration.issuer
            let written = try OpenAPIDocument.filling(
                try OpenAPIDocument.parse(OpenAPIDocument.withProviderNames(try String(contentsOf: Self.file, encoding: .utf8))), serverURL: issuer)
            let served = try Value.parse(first.body)
            #expect(served == (try Value.encoding(written)), "/openapi.json is not openapi.yaml")
            #expect(served["servers"] == OpenAPI.servers(issuer))
        }
    }

    @Test(
        "a document that does not parse, gives a key twice at any depth, or holds what JSON cannot, is refused with where",
        arguments: [
            ("openapi: 3.1.0\nopenapi: 3.1.1\n", "duplicated key(s): 'openapi'"),
            ("paths:\n  /v1/me:\n    get: {}\n    delete: {}\n    get: {}\n", "duplicated key(s): 'get'"),
            ("responses:\n  200: {description: a}\n  '200': {description: b}\n", "line 3, at /responses: the key 200 is given twice"),
            ("paths: {/v1/me: {get: {}}\n", "does not parse"),
            ("info:\n  title: [Latchkey\n", "does not parse"),
            ("info:\n\ttitle: Latchkey\n", "does not parse"),
            ("a: 1\n---\nb: 2\n", "does not parse"),
            ("info: {title: *missing}\n", "does not parse"),
            ("info: {logo: !!binary aGk=}\n", "line 1, at /info/logo: a value tagged tag:yaml.org,2002:binary"),
            ("{[a, b]: c}\n", "a key must be a string"),
            ("size: 99999999999999999999\n", "at /size: 99999999999999999999 is not an integer JSON can hold"),
            ("", "openapi.yaml is empty"),
        ])
    func refusesBrokenYAML(yaml: String, message: String) {
        do {
            let document = try OpenAPIDocument.parse(yaml)
            Issue.record("\(yaml.debugDescription) was accepted as \(document)")
        } catch {
            #expect(error.description.contains(message), "\(yaml.debugDescription): \(error.description)")
        }
    }

    @Test("scalars read as YAML 1.2's core schema: only true and false are booleans, and dates and versions are strings")
    func scalars() throws {
        let yaml = """
            plain: text
            quoted: '600'
            integer: 600
            negative: -1
            octal: 0o17
            hex: 0x1F
            number: 1.5
            exponent: 1e3
            truth: true
            lie: False
            nothing: ~
            empty:
            norway: no
            switch: on
            date: 2026-01-15
            version: 3.1.0
            time: 1:30
            text: !!str 42
            folded: >-
              one
              two
            literal: |
              one
              two
            alias: &shared {a: 1}
            again: *shared
            list: [1, '1', x]

            """
        let expected: [String: OpenAPIDocument.JSON] = [
            "plain": .string("text"), "quoted": .string("600"), "integer": .integer(600), "negative": .integer(-1), "octal": .integer(15),
            "hex": .integer(31), "number": .number(1.5), "exponent": .number(1000), "truth": .bool(true), "lie": .bool(false), "nothing": .null,
            "empty": .null, "norway": .string("no"), "switch": .string("on"), "date": .string("2026-01-15"), "version": .string("3.1.0"),
            "time": .string("1:30"), "text": .string("42"), "folded": .string("one two"), "literal": .string("one\ntwo\n"),
            "alias": .object(["a": .integer(1)]), "again": .object(["a": .integer(1)]), "list": .array([.integer(1), .string("1"), .string("x")]),
        ]
        let document = try OpenAPIDocument.parse(yaml)
        guard case .object(let members) = document else {
            Issue.record("not an object: \(document)")
            return
        }
        for key in Set(expected.keys).union(members.keys) {
            #expect(members[key] == expected[key], "\(key)")
        }
    }

    @Test("servers must list one server, whose url each server fills in")
    func filling() throws {
        let document = try OpenAPIDocument.parse("servers:\n  - {url: 'https://auth.example.com', description: This server}\n")
        #expect(
            try OpenAPIDocument.filling(document, serverURL: "http://127.0.0.1:8080")
                == .object(["servers": .array([.object(["url": .string("http://127.0.0.1:8080"), "description": .string("This server")])])]))
        for yaml in ["servers: []\n", "servers: [{url: a}, {url: b}]\n", "info: {}\n", "servers: {url: a}\n"] {
            #expect(throws: OpenAPIDocument.LoadError.self, "\(yaml)") { try OpenAPIDocument.filling(try OpenAPIDocument.parse(yaml), serverURL: "x") }
        }
    }
}

extension OpenAPI {
    /// `servers` as a server at `url` serves it.
    static func servers(_ url: String) -> Value { .array([.object(["url": .string(url)])]) }
}
