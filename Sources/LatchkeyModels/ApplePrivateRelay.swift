/// Apple's Hide My Email: the domains of the relay addresses Sign in with Apple hands out in place of a user's own.
public enum ApplePrivateRelay {
    /// `privaterelay.appleid.com`, and `private.icloud.com`, from which Apple also issues new relay addresses.
    public static let domains = ["privaterelay.appleid.com", "private.icloud.com"]

    /// Whether `email` is a relay address: mail to it reaches the user only while they keep forwarding on.
    public static func isRelayAddress(_ email: String) -> Bool {
        guard let at = email.lastIndex(of: "@") else { return false }
        return domains.contains(email[email.index(after: at)...].lowercased())
    }
}
