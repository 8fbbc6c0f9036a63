import Foundation
import KeyAuth

/// Keeps the SSH certificate that `keyauth agent` offers fresh while the agent holds the key, so
/// that ssh logins through the agent never meet an expired certificate and nobody has to run
/// `keyauth ssh cert` by hand.
///
/// It runs as a task beside the agent's socket loop (the loop never waits on the network): while
/// the agent is unlocked, once a minute, when the certificate file is missing, is not one of the
/// device key, or expires within ``renewalMargin`` (a quarter of its validity for a short-lived
/// one), it logs in with the held key (through the
/// agent's own socket, as `keyauth ssh cert` would) and writes a new one. A failure is said in
/// one line and retried after a backoff that doubles up to ``maximumBackoff``; a server that is
/// no SSH CA (404) is said once and asked again every ``authorityRecheckInterval``, so that a CA
/// its operator sets up later is found without restarting the agent.
///
/// The agent, the certificate file and the server are reached through closures, and ``run(now:sleep:)``
/// takes its clock and its sleep, so that tests drive the schedule with a fake clock and fetcher;
/// ``forAgent(session:server:log:)`` wires the real ones.
struct SSHCertificateRenewer: Sendable {
    /// A certificate that expires within this, or within a quarter of its validity when that is
    /// shorter, is replaced: a server issuing certificates of minutes would otherwise have every
    /// agent fetch a new one at each check.
    static let renewalMargin: TimeInterval = 600
    /// How often the certificate is checked while the agent is unlocked.
    static let checkInterval: TimeInterval = 60
    /// How often a locked agent looks whether it was unlocked, so that it renews soon after.
    static let lockedInterval: TimeInterval = 2
    /// The longest wait after failures, so that a server that is down is not hammered.
    static let maximumBackoff: TimeInterval = 600
    /// How often a server that answered 404 (no SSH CA) is asked again: rarely enough to cost
    /// it nothing, soon enough that a CA its operator adds later (`keyauth-server ssh-ca init`,
    /// then serving with `--ssh-ca-key-file`) is used within minutes.
    static let authorityRecheckInterval: TimeInterval = 300

    /// What one fetch gave.
    enum Outcome: Equatable {
        /// A certificate was written; it is valid until this time (seconds since 1970).
        case renewed(validBefore: Int64)
        /// The server answered 404: it has no SSH CA.
        case notIssued
        /// Anything else, with the reason.
        case failed(String)
    }

    /// The server's URL, named when it issues no certificates.
    let serverURL: String
    /// The certificate file, named when one is written.
    let certificatePath: String
    /// Whether the agent holds the key now.
    let isUnlocked: @Sendable () -> Bool
    /// The `valid after` and `valid before` of the certificate file when it certifies the device
    /// key; nil when it is missing, unreadable or another key's.
    let certificateValidity: @Sendable () -> (after: UInt64, before: UInt64)?
    /// Fetches a certificate from the server and writes it to ``certificatePath``.
    let fetch: @Sendable () async -> Outcome
    let log: @Sendable (String) -> Void

    /// The renewer of a running agent: it reads `server`'s lock state and the certificate beside
    /// `session`'s key, and fetches through `session`.
    static func forAgent(
        session: AccountSession, server: KeyAgentServer, log: @escaping @Sendable (String) -> Void
    ) -> SSHCertificateRenewer {
        let path = SSHCommand.certificatePath(in: session.keys.directory)
        return SSHCertificateRenewer(
            serverURL: session.account.serverURL, certificatePath: path,
            isUnlocked: { server.expiresAt != nil },
            certificateValidity: {
                guard let line = try? String(contentsOfFile: path, encoding: .utf8),
                    let key = try? session.keys.loadPublicKey(),
                    let blob = SSHAgentProtocol.certificateBlob(line: line, of: key)
                else { return nil }
                return SSHAgentProtocol.certificateValidity(blob)
            },
            fetch: {
                do throws(KeyAuthError) {
                    return .renewed(
                        validBefore: try await SSHCommand.fetchCertificate(session, writingTo: path).validBefore)
                } catch {
                    return error.oauthError?.statusCode == 404 ? .notIssued : .failed(error.message)
                }
            },
            log: log)
    }

    /// The session the renewals log in with: the agent's account, opened again with nobody to
    /// ask for a PIN, so that a renewal racing a lock or the timeout fails and is retried
    /// instead of prompting on the terminal the agent was started from.
    static func session(for account: String, context: CommandContext) throws(KeyAuthError) -> AccountSession {
        var io = context.io
        io.terminalReader = NoOneToAsk()
        return try AccountSession.open(
            context: CommandContext(io: io), account: account, pinFromStandardInput: false, waitForApproval: false)
    }

    /// Checks and renews until the task is cancelled, sleeping between checks (never less than
    /// ``lockedInterval``, so it cannot spin).
    ///
    /// - Parameters:
    ///   - now: the clock the certificate's expiry is compared with.
    ///   - sleep: waits that many seconds.
    func run(
        now: @Sendable () -> Date = { Date() },
        sleep: (TimeInterval) async -> Void = { try? await Task.sleep(for: .seconds($0)) }
    ) async {
        var schedule = Schedule()
        while !Task.isCancelled {
            var delay = Self.checkInterval
            if !isUnlocked() {
                delay = Self.lockedInterval
            } else if Self.needsCertificate(validity: certificateValidity(), now: now()) {
                let outcome = await fetch()
                let step = schedule.next(after: outcome)
                if step.say { log(message(for: outcome, delay: step.delay)) }
                delay = step.delay
            }
            await sleep(delay)
        }
    }

    /// Whether a certificate of `validity` (nil: none of the device key) must be replaced at
    /// `now`: missing, or expiring within ``renewalMargin`` or a quarter of its validity.
    static func needsCertificate(validity: (after: UInt64, before: UInt64)?, now: Date) -> Bool {
        guard let validity else { return true }
        // Compared as doubles: valid_before may be the "forever" 2^64-1.
        let span = validity.before > validity.after ? Double(validity.before - validity.after) : 0
        return Double(validity.before) <= now.timeIntervalSince1970 + min(renewalMargin, span / 4)
    }

    /// The wait after `failures` failures in a row: the check interval, doubled per failure, at
    /// most ``maximumBackoff``.
    static func backoff(afterFailures failures: Int) -> TimeInterval {
        let doublings = min(max(failures - 1, 0), 10)
        return min(checkInterval * Double(1 << doublings), maximumBackoff)
    }

    /// The line said about a fetch's `outcome`, followed by a wait of `delay` seconds.
    func message(for outcome: Outcome, delay: TimeInterval) -> String {
        switch outcome {
        case .renewed(let validBefore):
            "keyauth agent: ssh certificate renewed, valid until \(RFC3339.string(fromSeconds: validBefore)) "
                + "(\(certificatePath))"
        case .notIssued:
            "keyauth agent: \(serverURL) issues no SSH certificates; the agent offers the key alone and asks "
                + "again every \(Int(delay)) s"
        case .failed(let reason):
            "keyauth agent: cannot fetch an ssh certificate: \(reason); trying again in \(Int(delay)) s"
        }
    }

    /// What the renewer remembers between fetches, as a value: the failures in a row, and
    /// whether it said that the server issues no certificates. Its answers are the schedule.
    struct Schedule: Equatable {
        private(set) var failures = 0
        private(set) var saidNotIssued = false

        /// The wait after a fetch's `outcome`, and whether to say it: every renewal and failure,
        /// and a 404 only the first time until a certificate comes (the recheck is quiet).
        mutating func next(after outcome: Outcome) -> (delay: TimeInterval, say: Bool) {
            switch outcome {
            case .renewed:
                failures = 0
                saidNotIssued = false
                return (SSHCertificateRenewer.checkInterval, true)
            case .notIssued:
                failures = 0
                defer { saidNotIssued = true }
                return (SSHCertificateRenewer.authorityRecheckInterval, !saidNotIssued)
            case .failed:
                failures += 1
                return (SSHCertificateRenewer.backoff(afterFailures: failures), true)
            }
        }
    }
}

/// A reader with nobody behind it: the renewer's presence checks report themselves unavailable.
private struct NoOneToAsk: SecretReader {
    func readLine(prompt: String, echo: Bool) throws(KeyAuthError) -> SecretBytes {
        throw KeyAuthError(.presenceUnavailable, "the agent is locked: it asks nobody for a PIN")
    }

    func isAvailable() -> Bool { false }
}
