import Foundation
import LatchkeyJOSE
import LatchkeyProviders
import Yams

/// The OpenAPI 3.1 description of ``LatchkeyServer/routes``, served at `GET /openapi.json`.
///
/// It is written in `openapi.yaml` beside this file: the document people read, diff and feed to generators. The
/// EmbedOpenAPI build plugin compiles that file's text into this module as `yaml`, so the `latchkey` binary needs no
/// file beside it. The YAML is parsed once per process; each server fills in its own URL and encodes the JSON it
/// answers every request with once, at start-up.
///
/// The wire types in LatchkeyModels are the source of truth for the bodies. `OpenAPIContractTests` holds the document
/// to them (every example decodes into its type and re-encodes unchanged; every schema lists exactly the type's
/// members) and to the running server (every answer's status, media type and body are documented);
/// `OpenAPIDocumentTests` holds what is served to the YAML; `tests/contract/run.sh` runs schemathesis against
/// `latchkey serve --dev` with it.
enum OpenAPIDocument {
    /// Why `openapi.yaml` cannot be served.
    struct LoadError: Error, CustomStringConvertible {
        let description: String

        init(_ description: String) { self.description = description }
    }

    /// `openapi.yaml`, parsed. A failure is kept rather than raised: `/openapi.json` answers it with a 500, and the tests,
    /// which load the document first, fail on it.
    static let document = Result { () throws(LoadError) -> JSON in try parse(withProviderNames(yaml)) }

    /// The provider lists in the descriptions: `{providers}` every built-in provider (and each ``ProviderModule``),
    /// `{browserProviders}` those the browser flow signs in with (Facebook's logins come from its SDKs).
    static func withProviderNames(_ yaml: String) -> String {
        let names = ProviderModules.all.map { $0.name }
        return
            yaml
            .replacingOccurrences(of: "{providers}", with: names.joined(separator: ", "))
            .replacingOccurrences(of: "{browserProviders}", with: names.filter { $0 != "facebook" }.joined(separator: ", "))
    }

    /// What a server at `serverURL` serves: the document with its server's URL filled in, as JSON with sorted members.
    static func json(serverURL: String) throws(LoadError) -> [UInt8] {
        let filled = try filling(try document.get(), serverURL: serverURL)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        do {
            return Array(try encoder.encode(filled))
        } catch {
            throw LoadError("openapi.yaml cannot be encoded as JSON: \(error)")
        }
    }

    /// The one part of the document that depends on the server: the URL of its single entry in `servers`, which becomes
    /// the server's issuer (`publicUrl`, or `http://host:port`).
    static func filling(_ document: JSON, serverURL: String) throws(LoadError) -> JSON {
        guard case .object(var members) = document, case .array(let servers) = members["servers"], servers.count == 1,
            case .object(var server) = servers[0]
        else { throw LoadError("openapi.yaml: servers must list exactly one server, whose url each server fills in with its own") }
        server["url"] = .string(serverURL)
        members["servers"] = .array([.object(server)])
        return .object(members)
    }

    /// A YAML document as JSON values. Scalars are read with YAML 1.2's core schema (only `true` and `false` are
    /// booleans, so `on` or `no` stay strings; a date is a string); anything JSON cannot say (another tag, a key that is
    /// not a string, a key given twice) is an error that says where.
    static func parse(_ yaml: String) throws(LoadError) -> JSON {
        let root: Node?
        do {
            let resolver = Resolver.basic
                .appending(try Resolver.Rule(.null, "^(?:~|null|Null|NULL|)$"))
                .appending(try Resolver.Rule(.bool, "^(?:true|True|TRUE|false|False|FALSE)$"))
                .appending(try Resolver.Rule(.int, "^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"))
                .appending(try Resolver.Rule(.float, "^[-+]?(?:\\.[0-9]+|[0-9]+(?:\\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$"))
            root = try Yams.compose(yaml: yaml, resolver)
        } catch {
            throw LoadError("openapi.yaml does not parse: \(error)")
        }
        guard let root else { throw LoadError("openapi.yaml is empty") }
        return try value(root, at: "")
    }

    private static func value(_ node: Node, at path: String) throws(LoadError) -> JSON {
        let tag = Tag.Name(rawValue: node.tag.rawValue)
        switch node {
        case .scalar(let scalar) where tag == .str:
            return .string(scalar.string)
        case .scalar where tag == .null:
            return .null
        case .scalar(let scalar) where tag == .bool:
            return .bool(scalar.string.lowercased() == "true")
        case .scalar(let scalar) where tag == .int:
            let text = scalar.string
            let number = text.hasPrefix("0o") ? Int(text.dropFirst(2), radix: 8) : text.hasPrefix("0x") ? Int(text.dropFirst(2), radix: 16) : Int(text)
            guard let number else { throw error(node, path, "\(text) is not an integer JSON can hold") }
            return .integer(number)
        case .scalar(let scalar) where tag == .float:
            guard let number = Double(scalar.string), number.isFinite else { throw error(node, path, "\(scalar.string) is not a JSON number") }
            return .number(number)
        case .sequence(let sequence) where tag == .seq:
            var items: [JSON] = []
            for (index, item) in sequence.enumerated() { items.append(try value(item, at: "\(path)/\(index)")) }
            return .array(items)
        case .mapping(let mapping) where tag == .map:
            var members: [String: JSON] = [:]
            for (key, member) in mapping {
                guard case .scalar(let name) = key else { throw error(key, path, "a key must be a string") }
                guard members[name.string] == nil else { throw error(key, path, "the key \(name.string) is given twice") }
                members[name.string] = try value(member, at: "\(path)/\(name.string)")
            }
            return .object(members)
        default:
            throw error(node, path, "a value tagged \(tag.rawValue) has no JSON equivalent (quote a string)")
        }
    }

    private static func error(_ node: Node, _ path: String, _ problem: String) -> LoadError {
        LoadError("openapi.yaml\(node.mark.map { " line \($0.line)" } ?? ""), at \(path.isEmpty ? "/" : path): \(problem)")
    }
}

extension OpenAPIDocument {
    /// A JSON value: what the OpenAPI document is read into, and what JSON log lines are built from.
    enum JSON: Sendable, Encodable, Equatable {
        case null
        case bool(Bool)
        case integer(Int)
        case number(Double)
        case string(String)
        case array([JSON])
        case object([String: JSON])

        func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            switch self {
            case .null: try container.encodeNil()
            case .bool(let value): try container.encode(value)
            case .integer(let value): try container.encode(value)
            case .number(let value): try container.encode(value)
            case .string(let value): try container.encode(value)
            case .array(let value): try container.encode(value)
            case .object(let value): try container.encode(value)
            }
        }
    }
}
