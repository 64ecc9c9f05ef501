public import Foundation
public import LatchkeyJOSE
import LatchkeyModels

/// Sends the messages of e-mail sign-in: SMTP in production, a mailbox in development and tests. A failure that
/// means the code did not go out throws (the caller answers 503 and never claims the code was sent).
public protocol EmailSender: Sendable {
    func send(_ message: EmailCodeMessage) async throws
}

/// One sign-in code message: plain text and HTML, the code leading the subject so that iOS offers it as AutoFill.
public struct EmailCodeMessage: Sendable, Equatable {
    public var to: String
    public var subject: String
    public var text: String
    public var html: String

    public init(to: String, code: String, productName: String, lifetime: TimeInterval) {
        self.to = to
        let minutes = max(1, Int(lifetime / 60))
        subject = "\(code) is your \(productName) sign-in code"
        text = """
            \(code) is your \(productName) sign-in code.

            Enter it in \(productName) within \(minutes) minutes. If you did not ask for it, ignore this message: \
            no one can sign in without the code.
            """
        let escapedName = productName.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;")
        html = """
            <!doctype html><html><body style="font-family: -apple-system, sans-serif">\
            <p>Your \(escapedName) sign-in code:</p><p style="font-size: 28px; letter-spacing: 4px"><b>\(code)</b></p>\
            <p>Enter it in \(escapedName) within \(minutes) minutes. If you did not ask for it, ignore this message.</p>\
            </body></html>
            """
    }
}

/// An address the App Review team signs in with: a fixed code, no mail sent, each use audited.
public struct ReviewAccess: Sendable, Equatable {
    public var address: EmailAddress
    /// At least 8 digits.
    public var code: String
    public var expiresAt: Date

    public init(address: EmailAddress, code: String, expiresAt: Date) {
        self.address = address
        self.code = code
        self.expiresAt = expiresAt
    }
}

/// `email.*`: how codes look, live and are limited.
public struct EmailPolicy: Sendable {
    public var productName = "Latchkey"
    public var codeLength = 6
    public var codeLifetime: TimeInterval = 600
    /// Wrong tries that kill a code.
    public var maximumAttempts = 5
    /// Sends to one address: one per minute, ten per hour; and codes asked for by one address (IP) per hour.
    public var perAddressPerMinute = 1
    public var perAddressPerHour = 10
    public var perIPPerHour = 30
    public var reviewAccess: [ReviewAccess] = []

    public init() {}
}

/// A stored sign-in code: only its hash, its expiry and the wrong tries so far.
public struct EmailCodeRecord: Sendable, Equatable {
    public var address: String
    /// SHA-256 (hex) of the address and the code.
    public var codeHash: String
    public var expiresAt: Date
    public var attempts: Int

    public init(address: String, codeHash: String, expiresAt: Date, attempts: Int = 0) {
        self.address = address
        self.codeHash = codeHash
        self.expiresAt = expiresAt
        self.attempts = attempts
    }
}

/// What trying a code did.
public enum EmailCodeCheck: Sendable, Equatable {
    /// The code matched: it is used up.
    case accepted
    /// Wrong; `remaining` tries are left (0: the code is dead).
    case wrong(remaining: Int)
    /// No live code for the address (none asked for, expired, used, or killed by wrong tries).
    case none
}

/// Sign-in codes, kept fleet-wide in the store.
public protocol EmailCodeStore: Sendable {
    /// Saves the address's new code, replacing an older one.
    func saveEmailCode(_ record: EmailCodeRecord) async throws
    /// Tries `codeHash` against the address's live code in one transaction: a match uses it up; a miss counts, and the
    /// `maximumAttempts`th miss deletes it. Compared in constant time.
    func checkEmailCode(address: String, codeHash: String, at: Date, maximumAttempts: Int) async throws -> EmailCodeCheck
}

/// E-mail one-time codes: `POST /v1/auth/email/start` sends a code (always 202 alike, whether the address is known),
/// `verify` turns a right code into a verified `email` identity for the sign-in or link that follows.
public struct EmailCodes: Sendable {
    public let store: any EmailCodeStore & GuestStore & AuditStore
    public let sender: any EmailSender
    public let policy: EmailPolicy
    public let timeSource: TimeSource

    /// The provider name of e-mail identities.
    public static let provider = "email"

    public init(store: any EmailCodeStore & GuestStore & AuditStore, sender: any EmailSender, policy: EmailPolicy, timeSource: TimeSource) {
        self.store = store
        self.sender = sender
        self.policy = policy
        self.timeSource = timeSource
    }

    /// Parses an address, or `invalid_request` saying what an address is.
    public static func address(_ text: String) throws(LatchkeyError) -> EmailAddress {
        guard let address = EmailAddress(text) else { throw LatchkeyError(.malformedRequest, "email is not an e-mail address Latchkey can send to") }
        return address
    }

    /// Sends a new code to `address` unless a limit is reached (`rate_limited`), or the address is a review address
    /// (nothing is sent). A sender that fails throws `temporarily_unavailable`: no code was sent.
    public func start(_ address: EmailAddress, ip: String?) async throws {
        let now = timeSource.now
        if let ip, try await store.countEvent(key: "email-ip|\(ip)", window: 3600, at: now) > policy.perIPPerHour {
            throw LatchkeyError(.rateLimited, "too many codes asked for from this address this hour; try again later")
        }
        if reviewAccess(address, at: now) != nil { return }
        guard try await store.countEvent(key: "email-minute|\(address)", window: 60, at: now) <= policy.perAddressPerMinute,
            try await store.countEvent(key: "email-hour|\(address)", window: 3600, at: now) <= policy.perAddressPerHour
        else { throw LatchkeyError(.rateLimited, "a code was sent to this address moments ago; use it, or ask again in a minute") }
        let code = Self.makeCode(length: policy.codeLength)
        try await store.saveEmailCode(
            EmailCodeRecord(address: address.normalized, codeHash: Self.hash(code, for: address), expiresAt: now.addingTimeInterval(policy.codeLifetime)))
        do {
            try await sender.send(EmailCodeMessage(to: address.normalized, code: code, productName: policy.productName, lifetime: policy.codeLifetime))
        } catch {
            throw LatchkeyError(.temporarilyUnavailable, "the sign-in code could not be sent now; try again in a minute")
        }
    }

    /// The verified identity of `address` when `code` is its live code (or its review code): `invalid_grant` otherwise.
    public func verify(_ address: EmailAddress, code: String) async throws -> VerifiedIdentity {
        let now = timeSource.now
        let identity = VerifiedIdentity(
            issuer: Self.provider, subject: address.normalized, audience: Self.provider, issuedAt: now, expiresAt: now.addingTimeInterval(60),
            email: address.normalized, emailVerified: true)
        if let access = reviewAccess(address, at: now) {
            guard constantTimeEquals(access.code, code) else { throw LatchkeyError(.invalidGrant, "the code is wrong") }
            try await store.audit(AuditEvent(at: now, userID: nil, kind: "review_access.used", detail: "address=\(address.normalized)"))
            return identity
        }
        guard code.count == policy.codeLength, code.allSatisfy(\.isASCII), code.allSatisfy(\.isNumber) else {
            throw LatchkeyError(.invalidGrant, "the code is \(policy.codeLength) digits")
        }
        switch try await store.checkEmailCode(
            address: address.normalized, codeHash: Self.hash(code, for: address), at: now, maximumAttempts: policy.maximumAttempts)
        {
        case .accepted: return identity
        case .wrong(let remaining) where remaining > 0: throw LatchkeyError(.invalidGrant, "the code is wrong; \(remaining) tries left")
        case .wrong: throw LatchkeyError(.invalidGrant, "the code is wrong, and too many wrong tries ended it: ask for a new one")
        case .none: throw LatchkeyError(.invalidGrant, "no live code for this address: it expired, was used, or was never asked for; ask for a new one")
        }
    }

    /// The review access of `address`, while it lasts.
    func reviewAccess(_ address: EmailAddress, at now: Date) -> ReviewAccess? {
        policy.reviewAccess.first { $0.address == address && now < $0.expiresAt }
    }

    /// A code of `length` decimal digits, uniformly drawn.
    static func makeCode(length: Int) -> String {
        var digits = ""
        while digits.count < length {
            for byte in systemRandomBytes(16) where byte < 250 && digits.count < length { digits.append(Character(String(byte % 10))) }
        }
        return digits
    }

    /// The stored form of a code: bound to its address, so that one hash says nothing about another address's code.
    static func hash(_ code: String, for address: EmailAddress) -> String { sha256Hex(address.normalized + "|" + code) }
}
