import ArgumentParser

@main
struct Latchkey: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "latchkey",
        abstract: "Sign in with Apple (and other providers) for apps with their own backend.",
        version: "0.1.0",
        subcommands: [
            Serve.self, Demo.self, Emulate.self, ClientSecretCommand.self, TokenCommand.self, DoctorCommand.self, PKCECommand.self, KeysCommand.self,
            UsersCommand.self, SessionsCommand.self, InvitesCommand.self, WebhooksCommand.self, AdminKeysCommand.self, Migrate.self,
            AppleCommand.self, AttestCommand.self, AuditCommand.self, HealthcheckCommand.self,
        ]
    )
}
