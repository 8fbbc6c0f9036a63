import Foundation
import KeyAuth

/// Keeps the SSH certificate that `keyauth agent` offers fresh while the agent holds the key, so
/// that ssh logins through the agent never meet an expired certificate and nobody has to run
/// `keyauth ssh cert` by hand.
///
/// It runs as a task beside the agent's socket loop (the loop never waits on the network): while
/// the agent is unlocked, once a minute, when the certificate file is missing, is not one of the
/// device key, or expires within ``renewalMargin``, it logs in with the held key (through the
/// agent's own socket, as `keyauth ssh cert` would) and writes a new one. A failure is said in
/// one line and retried after a backoff that doubles up to ``maximumBackoff``; a server that is
/// no SSH CA (404) is said once and not asked again.
struct SSHCertificateRenewer: Sendable {
    /// A certificate that expires within this is replaced.
    static let renewalMargin: TimeInterval = 600
    /// How often the certificate is checked while the agent is unlocked.
    static let checkInterval: TimeInterval = 60
    /// How often a locked agent looks whether it was unlocked, so that it renews soon after.
    static let lockedInterval: TimeInterval = 2
    /// The longest wait after failures, so that a server that is down is not hammered.
    static let maximumBackoff: TimeInterval = 600

    let session: AccountSession
    let server: KeyAgentServer
    let log: @Sendable (String) -> Void

    /// The session the renewals log in with: the agent's account, opened again with nobody to
    /// ask for a PIN, so that a renewal racing a lock or the timeout fails and is retried
    /// instead of prompting on the terminal the agent was started from.
    static func session(for account: String, context: CommandContext) throws(KeyAuthError) -> AccountSession {
        var io = context.io
        io.terminalReader = NoOneToAsk()
        return try AccountSession.open(
            context: CommandContext(io: io), account: account, pinFromStandardInput: false, waitForApproval: false)
    }

    var certificatePath: String { SSHCommand.certificatePath(in: session.keys.directory) }

    /// Checks and renews until the task is cancelled.
    func run() async {
        var failures = 0
        while !Task.isCancelled {
            var delay = Self.checkInterval
            if server.expiresAt == nil {
                delay = Self.lockedInterval
            } else if needsCertificate(now: Date()) {
                switch await renew() {
                case .renewed:
                    failures = 0
                case .failed(let reason):
                    failures += 1
                    delay = Self.backoff(afterFailures: failures)
                    log("keyauth agent: cannot fetch an ssh certificate: \(reason); trying again in \(Int(delay)) s")
                case .notIssued:
                    return
                }
            }
            try? await Task.sleep(for: .seconds(delay))
        }
    }

    enum Outcome: Equatable {
        case renewed, notIssued
        case failed(String)
    }

    /// Fetches and writes one certificate; says so in one line when it did, or when the server
    /// issues none.
    func renew() async -> Outcome {
        do {
            let grant = try await SSHCommand.fetchCertificate(session, writingTo: certificatePath)
            log(
                "keyauth agent: ssh certificate renewed, valid until \(RFC3339.string(fromSeconds: grant.validBefore)) "
                    + "(\(certificatePath))")
            return .renewed
        } catch {
            if error.oauthError?.statusCode == 404 {
                log(
                    "keyauth agent: \(session.account.serverURL) issues no SSH certificates; "
                        + "the agent offers the key alone and does not ask again")
                return .notIssued
            }
            return .failed(error.message)
        }
    }

    /// Whether the certificate file is missing, is not the device key's, or expires within
    /// ``renewalMargin`` of `now`.
    func needsCertificate(now: Date) -> Bool {
        guard let line = try? String(contentsOfFile: certificatePath, encoding: .utf8),
            let key = try? session.keys.loadPublicKey(),
            let blob = SSHAgentProtocol.certificateBlob(line: line, of: key),
            let validBefore = SSHAgentProtocol.certificateValidBefore(blob)
        else { return true }
        // Compared as doubles: valid_before may be the "forever" 2^64-1.
        return Double(validBefore) <= now.timeIntervalSince1970 + Self.renewalMargin
    }

    /// The wait after `failures` failures in a row: the check interval, doubled per failure, at
    /// most ``maximumBackoff``.
    static func backoff(afterFailures failures: Int) -> TimeInterval {
        let doublings = min(max(failures - 1, 0), 10)
        return min(checkInterval * Double(1 << doublings), maximumBackoff)
    }
}

/// A reader with nobody behind it: the renewer's presence checks report themselves unavailable.
private struct NoOneToAsk: SecretReader {
    func readLine(prompt: String, echo: Bool) throws(KeyAuthError) -> SecretBytes {
        throw KeyAuthError(.presenceUnavailable, "the agent is locked: it asks nobody for a PIN")
    }

    func isAvailable() -> Bool { false }
}
