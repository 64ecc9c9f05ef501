import Foundation
import LatchkeyCore
public import LatchkeyJOSE

/// Where `SQLAuthStore` keeps its data.
public enum StoreLocation: Sendable, Equatable, CustomStringConvertible {
    /// An SQLite file, created if missing (the default: no set-up).
    case sqlite(path: String)
    /// PostgreSQL, for more than one server instance: `postgres://user:password@host:5432/database`.
    case postgres(url: String)

    /// Reads a database URL (`postgres://…`, `sqlite:///path` or a plain file path).
    public init(url: String) throws(LatchkeyError) {
        if url.hasPrefix("postgres://") || url.hasPrefix("postgresql://") {
            self = .postgres(url: url)
        } else if url.hasPrefix("sqlite://") {
            self = .sqlite(path: String(url.dropFirst("sqlite://".count)))
        } else if !url.contains("://"), !url.isEmpty {
            self = .sqlite(path: url)
        } else {
            throw LatchkeyError(.invalidConfiguration, "database URL must start with postgres:// or sqlite://, or be a file path")
        }
    }

    /// Never shows a password.
    public var description: String {
        switch self {
        case .sqlite(let path): return "sqlite:\(path)"
        case .postgres(let url):
            guard var components = URLComponents(string: url) else { return "postgres://(unparseable)" }
            if components.password != nil { components.password = "***" }
            return components.string ?? "postgres://"
        }
    }
}
