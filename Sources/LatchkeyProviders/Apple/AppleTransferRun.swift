import Foundation
public import LatchkeyCore
public import LatchkeyJOSE

/// `latchkey apple transfer prepare` and `complete`: the calls to Apple's `/auth/usermigrationinfo` for every Apple
/// identity (Apple's TN3159), paced, resumable (each answer is stored as it comes), and reporting what Apple refuses.
public struct AppleTransferRun: Sendable {
    public let client: AppleClient
    /// The app whose users move: its client id (the bundle id).
    public let clientID: String
    public let store: any MigrationStore
    public let transfers: AppleTransfers
    /// The pause between two calls to Apple.
    public var pace: Duration
    public let timeSource: TimeSource

    public init(
        client: AppleClient, clientID: String, store: any MigrationStore, transfers: AppleTransfers, pace: Duration = .milliseconds(20),
        timeSource: TimeSource = .system
    ) {
        self.client = client
        self.clientID = clientID
        self.store = store
        self.transfers = transfers
        self.pace = pace
        self.timeSource = timeSource
    }

    /// What a run did.
    public struct Report: Sendable, Equatable, Codable {
        public var dryRun: Bool
        /// Identities given a `transfer_sub` (prepare), or moved (complete); in a dry run, those that would be.
        public var done = 0
        /// What Apple refused, by identity.
        public var refused: [Refusal] = []

        public struct Refusal: Sendable, Equatable, Codable {
            public var identityId: String
            public var subject: String
            public var reason: String
        }
    }

    /// Sending team: asks Apple for a `transfer_sub` of each Apple identity not prepared for `targetTeam` yet.
    public func prepare(targetTeam: String, dryRun: Bool) async throws -> Report {
        try AppleSigningCredentials.checkTeamID(targetTeam)
        guard targetTeam != client.configuration.credentials.teamID else {
            throw LatchkeyError(
                .invalidConfiguration,
                "--target-team \(targetTeam) is this team's own id (apple.teamId): give the id of the team the app is transferred TO, "
                    + "or Apple makes transfer ids no one can exchange")
        }
        var report = Report(dryRun: dryRun)
        var token: TeamToken?
        var after: String?
        while true {
            let batch = try await store.appleIdentitiesToPrepare(targetTeam: targetTeam, after: after, limit: 200)
            guard let last = batch.last else { break }
            after = last.id
            if dryRun {
                report.done += batch.count
                continue
            }
            for identity in batch {
                let now = timeSource.now
                do {
                    let transferSubject = try await client.makeTransferSubject(
                        for: identity.subject, recipientTeamID: targetTeam, clientID: clientID, teamToken: try await fresh(&token))
                    try await store.saveAppleTransfer(
                        AppleTransferRecord(
                            identityID: identity.id, oldSubject: identity.subject, transferSubject: transferSubject, targetTeam: targetTeam, preparedAt: now))
                    report.done += 1
                } catch let error as LatchkeyError where Self.isRefusal(error) {
                    try await store.saveAppleTransfer(
                        AppleTransferRecord(
                            identityID: identity.id, oldSubject: identity.subject, transferSubject: nil, targetTeam: targetTeam, preparedAt: now,
                            failure: error.reason))
                    report.refused.append(.init(identityId: identity.id, subject: identity.subject, reason: error.reason))
                }
                try await Task.sleep(for: pace)
            }
        }
        return report
    }

    /// Recipient team: exchanges each stored `transfer_sub` not moved yet for the user's subject under this team, and
    /// moves the identity there.
    public func complete(dryRun: Bool) async throws -> Report {
        var report = Report(dryRun: dryRun)
        var token: TeamToken?
        var after: String?
        while true {
            let batch = try await store.unmovedAppleTransfers(after: after, limit: 200)
            guard let last = batch.last else { break }
            after = last.identityID
            if dryRun {
                report.done += batch.count
                continue
            }
            for record in batch {
                guard let transferSubject = record.transferSubject else { continue }
                do {
                    let user = try await client.exchangeTransferSubject(transferSubject, clientID: clientID, teamToken: try await fresh(&token))
                    if try await transfers.move(record, newSubject: user.sub, email: user.email, isPrivateEmail: user.isPrivateEmail, via: "complete") != nil {
                        report.done += 1
                    }
                } catch let error as LatchkeyError where Self.isRefusal(error) || error.code == .identityInUse {
                    var failed = record
                    failed.failure = error.reason
                    try await store.saveAppleTransfer(failed)
                    report.refused.append(.init(identityId: record.identityID, subject: record.oldSubject, reason: error.reason))
                }
                try await Task.sleep(for: pace)
            }
        }
        return report
    }

    /// Apple said no about this user (as opposed to not answering, or refusing the client: those stop the run).
    static func isRefusal(_ error: LatchkeyError) -> Bool {
        switch error.code {
        case .invalidRequest, .invalidGrant: true
        default: false
        }
    }

    /// A team token, fetched again after 50 of its 60 minutes.
    private struct TeamToken {
        var value: String
        var fetchedAt: Date
    }

    private func fresh(_ token: inout TeamToken?) async throws -> String {
        let now = timeSource.now
        if let current = token, now.timeIntervalSince(current.fetchedAt) < 3000 { return current.value }
        let value = try await client.teamTransferToken(clientID: clientID)
        token = TeamToken(value: value, fetchedAt: now)
        return value
    }
}
