/// Why a message was not sent: a bounded snake_case ``errorCode``, a ``reason`` that says what to fix, and whether trying
/// again later may succeed.
///
/// Neither the code nor the reason ever contains the SMTP password or the AUTH payload: reply texts the server sends back
/// are quoted with those removed.
public struct MailError: Error, Sendable, Equatable, CustomStringConvertible {
    enum Code: String, Sendable {
        case invalidServerURL = "invalid_server_url"
        case invalidAddress = "invalid_address"
        case connectionFailed = "connection_failed"
        case connectionClosed = "connection_closed"
        case timedOut = "timed_out"
        case cancelled = "cancelled"
        case tlsRequired = "tls_required"
        case tlsFailed = "tls_failed"
        case authenticationUnavailable = "authentication_unavailable"
        case authenticationFailed = "authentication_failed"
        case temporaryFailure = "temporary_failure"
        case permanentFailure = "permanent_failure"
        case unexpectedReply = "unexpected_reply"
    }

    let code: Code
    /// What went wrong and what to fix, for logs and the CLI.
    public let reason: String
    /// Whether the same message may go through later: the server answered 4xx, or the connection failed or timed out.
    /// A 5xx answer, a refused configuration or an invalid address is not temporary.
    public let isTemporary: Bool
    /// The server's three-digit reply code, when the failure is the server's answer.
    public let replyCode: Int?

    init(_ code: Code, _ reason: String, isTemporary: Bool, replyCode: Int? = nil) {
        self.code = code
        self.reason = reason
        self.isTemporary = isTemporary
        self.replyCode = replyCode
    }

    /// The failure's kind in snake_case, safe for metrics: `timed_out`, `tls_required`, `permanent_failure`, …
    public var errorCode: String { code.rawValue }

    /// The code and the reason.
    public var description: String { "\(code.rawValue): \(reason)" }

    /// Two errors are equal when their codes are.
    public static func == (lhs: MailError, rhs: MailError) -> Bool { lhs.code == rhs.code }
}

extension MailError {
    static func invalidServerURL(_ reason: String) -> MailError {
        MailError(.invalidServerURL, "the SMTP server URL \(reason); write smtp://user@host:587 (STARTTLS) or smtps://user@host:465 (TLS)", isTemporary: false)
    }

    /// The error for a reply that is not the one a step expects: 4xx is temporary, 5xx permanent.
    static func reply(_ reply: SMTPReply, to step: String, redacting secrets: [String]) -> MailError {
        let text = reply.quotedText(redacting: secrets)
        switch reply.code {
        case 400..<500:
            return MailError(
                .temporaryFailure, "the server deferred \(step) with \(reply.code): \(text); try again later", isTemporary: true, replyCode: reply.code)
        case 500..<600 where step.hasPrefix("AUTH"):
            return MailError(
                .authenticationFailed, "the server refused \(step) with \(reply.code): \(text); check the SMTP user name and password", isTemporary: false,
                replyCode: reply.code)
        case 500..<600:
            return MailError(.permanentFailure, "the server refused \(step) with \(reply.code): \(text)", isTemporary: false, replyCode: reply.code)
        default:
            return MailError(
                .unexpectedReply, "the server answered \(step) with an unexpected \(reply.code): \(text)", isTemporary: false, replyCode: reply.code)
        }
    }
}
