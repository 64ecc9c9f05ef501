import Foundation
import Testing

/// No Apple toolchain builds this package in CI, so the Apple-only files of LatchkeyClient must stay too thin to hide
/// a decision: each under 100 lines, with at most the branches listed here (each one a translation: an availability
/// check, an optional chain, a platform switch). A new branch fails this test: move the decision into platform-neutral
/// code with a test, or, if it truly is a translation, raise the budget here in the same change, saying why.
@Suite("Client: the Apple-only files stay thin")
struct AppleShellBudgetTests {
    /// Branch keywords allowed per Apple-only file.
    static let budgets: [String: Int] = [
        // `#available` for the https callback (twice), the anchor's default, the key window on each platform (3 `??`),
        // the callback enum's translation (2 cases), start()'s refusal, the pre-17.4 custom scheme.
        "WebAuthenticationSheet.swift": 10,
        // The compare-and-swap's "not expected", the write's four cases, and the access group.
        "KeychainTokenStore.swift": 6,
        "FileTokenStore+Apple.swift": 0,
        // `#available` for excluded credentials, the two credential casts' refusals, the anchor's default.
        "PlatformPasskeyAuthenticator.swift": 4,
        // The access group.
        "KeychainItems.swift": 1,
        // The access control that could not be made.
        "SecureEnclaveKeys.swift": 1,
        // The catch that translates DeviceCheck's errors.
        "AppAttest+DeviceCheck.swift": 1,
    ]

    static let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Sources/LatchkeyClient")

    /// Files compiled only on Apple platforms: their first line is an `#if` naming an Apple framework or platform.
    static func appleOnlyFiles() throws -> [(name: String, text: String)] {
        let apple = ["Security", "AuthenticationServices", "CryptoKit", "DeviceCheck", "Darwin", "UIKit", "AppKit", "os(iOS)", "os(macOS)"]
        return try FileManager.default.contentsOfDirectory(atPath: sources.path).sorted().compactMap { name in
            guard name.hasSuffix(".swift") else { return nil }
            let text = try String(contentsOf: sources.appendingPathComponent(name), encoding: .utf8)
            let first = text.split(separator: "\n", maxSplits: 1).first.map(String.init) ?? ""
            guard first.hasPrefix("#if"), !first.hasPrefix("#if !"), apple.contains(where: first.contains) else { return nil }
            return (name, text)
        }
    }

    /// `if`, `guard`, `switch` cases, loops, `catch`, `??` and `?:` outside comments and strings' ends of lines.
    static func branches(in text: String) -> Int {
        let keywords = try! Regex(#"(^|[^\w#.(])(if|guard|case|for|while|catch)(?![\w:])|\?\?|\s\?\s"#)
        return text.split(separator: "\n").reduce(0) { count, line in
            let code = line.trimmingCharacters(in: .whitespaces)
            guard !code.hasPrefix("//"), !code.hasPrefix("#") else { return count }
            return count + code.matches(of: keywords).count
        }
    }

    @Test("each Apple-only file is listed, under 100 lines, and within its branch budget")
    func thin() throws {
        let files = try Self.appleOnlyFiles()
        #expect(Set(files.map(\.name)) == Set(Self.budgets.keys), "every Apple-only file has a budget here, and every budget a file")
        for file in files {
            let lines = file.text.split(separator: "\n", omittingEmptySubsequences: false).count
            #expect(lines <= 100, "\(file.name) has \(lines) lines")
            let branches = Self.branches(in: file.text)
            #expect(branches <= Self.budgets[file.name] ?? 0, "\(file.name) has \(branches) branches")
        }
    }

    @Test("the budget counts branches: a file with an added decision goes over")
    func countsBranches() {
        #expect(Self.branches(in: "let a = b ?? c\n// if comment\nguard x else { return }\nif y { } else if z { }\nswitch v {\ncase .a: 1\n}") == 5)
        #expect(Self.branches(in: "#if os(macOS)\nlet verify = identifier(for: x)\n#endif") == 0)
    }

    @Test("the client and the models use no Mutex or Atomic, which iOS 17 lacks")
    func noIOS18Synchronization() throws {
        for module in ["LatchkeyClient", "LatchkeyModels"] {
            let folder = Self.sources.deletingLastPathComponent().appendingPathComponent(module)
            for name in try FileManager.default.contentsOfDirectory(atPath: folder.path) where name.hasSuffix(".swift") {
                let text = try String(contentsOf: folder.appendingPathComponent(name), encoding: .utf8)
                let code = text.split(separator: "\n").filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("//") }.joined(separator: "\n")
                #expect(code.firstMatch(of: try Regex(#"\b(Mutex|Atomic)<|import Synchronization"#)) == nil, "\(module)/\(name)")
            }
        }
    }
}
