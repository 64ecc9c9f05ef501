import Foundation
import LatchkeyModels
import Testing

@testable import LatchkeyClient

#if canImport(Glibc)
    import Glibc
#endif

/// The decisions of the Apple-only files, tested here: the shells only translate them into Security and
/// AuthenticationServices calls.
@Suite("Client: the Apple layer's decisions")
struct AppleLayerTests {
    // MARK: - The web sheet

    @Test("the callback: a custom scheme, or https from iOS 17.4 / macOS 14.4; never http or no scheme")
    func callbacks() throws {
        #expect(try WebSheetFlow.callback(for: "com.example.app:/oauth2redirect", httpsCallbacksAvailable: false) == .customScheme("com.example.app"))
        #expect(
            try WebSheetFlow.callback(for: "https://app.example.com/auth/callback", httpsCallbacksAvailable: true)
                == .https(host: "app.example.com", path: "/auth/callback"))
        for (uri, https) in [("https://app.example.com/cb", false), ("http://localhost:8080/cb", true), ("no-scheme", true), ("https:/cb", true)] {
            #expect(throws: LatchkeyClientError.webSheetUnavailable, "\(uri)") { try WebSheetFlow.callback(for: uri, httpsCallbacksAvailable: https) }
        }
    }

    @Test("the sheet's outcome: a URL, the user's cancel, no window, anything else")
    func outcomes() {
        let url = URL(string: "com.example.app:/cb?code=c&state=s")!
        #expect(WebSheetFlow.outcome(callbackURL: url, error: nil) == .success(url))
        let domain = "com.apple.AuthenticationServices.WebAuthenticationSession"
        #expect(WebSheetFlow.outcome(callbackURL: nil, error: NSError(domain: domain, code: 1)) == .failure(.cancelled))
        for code in [2, 3, 99] {
            #expect(WebSheetFlow.outcome(callbackURL: nil, error: NSError(domain: domain, code: code)) == .failure(.webSheetUnavailable))
        }
        #expect(WebSheetFlow.outcome(callbackURL: nil, error: URLError(.notConnectedToInternet)) == .failure(.webSheetUnavailable))
        #expect(WebSheetFlow.outcome(callbackURL: nil, error: nil) == .failure(.webSheetUnavailable))
        #expect(LatchkeyClientError.cancelled.errorCode == "cancelled")
    }

    @Test("a second sheet is refused while one is up, and allowed once it is gone")
    func oneSheetAtATime() throws {
        let gate = WebSheetFlow.Gate()
        try gate.enter()
        #expect(throws: LatchkeyClientError.webSheetUnavailable) { try gate.enter() }
        gate.leave()
        try gate.enter()
        gate.leave()
    }

    // MARK: - The Keychain

    @Test("a read: found, damaged, not found (believed only when protected data is not known to be unreadable), refused")
    func keychainReads() throws {
        let session = Self.session()
        let data = try session.encoded()
        #expect(try KeychainDecisions.item(status: 0, data: data, protectedDataAvailable: nil) == .session(session))
        #expect(try KeychainDecisions.item(status: 0, data: Data("{".utf8), protectedDataAvailable: true) == .damaged)
        #expect(try KeychainDecisions.item(status: 0, data: nil, protectedDataAvailable: true) == .damaged)
        #expect(try KeychainDecisions.item(status: -25300, data: nil, protectedDataAvailable: true) == KeychainDecisions.Item.none)
        #expect(try KeychainDecisions.item(status: -25300, data: nil, protectedDataAvailable: nil) == KeychainDecisions.Item.none)
        // The prewarm case: "not found" before the first unlock is not "signed out".
        let prewarm = #expect(throws: KeychainStoreError.self) { try KeychainDecisions.item(status: -25300, data: nil, protectedDataAvailable: false) }
        #expect(prewarm?.status == -25300)
        let locked = #expect(throws: KeychainStoreError.self) { try KeychainDecisions.item(status: -25308, data: nil, protectedDataAvailable: true) }
        #expect(locked?.reason.contains("locked") == true)
        let entitlement = #expect(throws: KeychainStoreError.self) { try KeychainDecisions.item(status: -34018, data: nil, protectedDataAvailable: true) }
        #expect(entitlement?.status == -34018 && entitlement?.reason.contains("entitlement") == true)
    }

    @Test("compare-and-swap: a damaged item reads as none, and a sign-in replaces it, a sign-out deletes it")
    func keychainWrites() throws {
        let session = Self.session()
        var next = session
        next.refreshToken = "r2"
        #expect(KeychainDecisions.write(current: .none, expected: nil, new: session) == .add(session))
        #expect(KeychainDecisions.write(current: .damaged, expected: nil, new: session) == .update(session))
        #expect(KeychainDecisions.write(current: .damaged, expected: nil, new: nil) == .delete)
        #expect(KeychainDecisions.write(current: .none, expected: nil, new: nil) == KeychainDecisions.Write.nothing)
        #expect(KeychainDecisions.write(current: .session(session), expected: session, new: next) == .update(next))
        #expect(KeychainDecisions.write(current: .session(session), expected: session, new: nil) == .delete)
        #expect(KeychainDecisions.write(current: .session(next), expected: session, new: nil) == nil, "another client changed it")
        #expect(KeychainDecisions.write(current: .none, expected: session, new: next) == nil)
        // Statuses of the write: a race lost to another process is false, not an error.
        #expect(try KeychainDecisions.written(.add(session), status: 0))
        #expect(try !KeychainDecisions.written(.add(session), status: -25299))
        #expect(try !KeychainDecisions.written(.update(session), status: -25300))
        #expect(try KeychainDecisions.written(.delete, status: -25300))
        #expect(throws: KeychainStoreError.self) { try KeychainDecisions.written(.update(session), status: -25308) }
    }

    @Test("one lock per Keychain item in the process, whichever store instance asks")
    func keychainLocks() {
        #expect(KeychainDecisions.lock(service: "s", accessGroup: nil) === KeychainDecisions.lock(service: "s", accessGroup: nil))
        #expect(KeychainDecisions.lock(service: "s", accessGroup: "g") !== KeychainDecisions.lock(service: "s", accessGroup: nil))
    }

    @Test("the protected-data canary: absent is unknown, readable is available, refused is unavailable; a found item writes it")
    func canary() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("canary-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let canary = ProtectedDataCanary(url: directory.appendingPathComponent("canary"))
        #expect(canary.isAvailable() == nil)
        // A "not found" with no canary yet is believed, and writes no canary.
        #expect(try KeychainDecisions.item(status: -25300, data: nil, canary: canary, protect: { _ in }) == KeychainDecisions.Item.none)
        #expect(canary.isAvailable() == nil)
        let protected = Counter()
        _ = try KeychainDecisions.item(status: 0, data: try Self.session().encoded(), canary: canary, protect: { _ in protected.add() })
        #expect(canary.isAvailable() == true)
        #expect(protected.value == 1)
        let refused = NSError(domain: NSCocoaErrorDomain, code: CocoaError.fileReadNoPermission.rawValue)
        #expect(ProtectedDataCanary.availability(afterReadError: refused) == false)
        let posix = NSError(
            domain: NSCocoaErrorDomain, code: 256, userInfo: [NSUnderlyingErrorKey: NSError(domain: NSPOSIXErrorDomain, code: Int(EPERM))])
        #expect(ProtectedDataCanary.availability(afterReadError: posix) == false)
        #expect(ProtectedDataCanary.availability(afterReadError: NSError(domain: NSCocoaErrorDomain, code: 4)) == nil)
    }

    // MARK: - Another process's refresh

    @Test("a refresh marker's owner: gone only on ESRCH or after the lease; EPERM (the iOS sandbox) waits for the lease")
    func liveness() {
        #expect(SessionEngine.isAbandoned(age: 1, lease: 45, ownedHere: false) { ESRCH })
        #expect(!SessionEngine.isAbandoned(age: 1, lease: 45, ownedHere: false) { EPERM })
        #expect(SessionEngine.isAbandoned(age: 46, lease: 45, ownedHere: false) { EPERM })
        #expect(!SessionEngine.isAbandoned(age: 1, lease: 45, ownedHere: false) { 0 })
        #expect(!SessionEngine.isAbandoned(age: 1, lease: 45, ownedHere: true) { ESRCH })
    }

    static func session() -> StoredSession {
        StoredSession(
            tokens: TokenPairResponse(accessToken: "a", expiresIn: 900, refreshToken: "r"), userID: "u", receivedAt: Date(timeIntervalSince1970: 1),
            refreshAhead: 120)
    }
}

final class Counter: @unchecked Sendable {
    // @unchecked: `count` is only used while holding `lock`.
    private let lock = NSLock()
    private var count = 0
    func add() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}
