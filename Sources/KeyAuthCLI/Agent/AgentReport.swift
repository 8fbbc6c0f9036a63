import Foundation
import KeyAuth

/// What the user's `keyauth agent` says about itself: which account it serves and whether it
/// holds the key, for `keyauth status` and for the errors that a locked agent explains.
struct AgentReport: Sendable {
    /// The agent's socket.
    let path: String
    /// The account it was started for.
    let account: String?
    /// Whether it holds nothing usable now (`keyauth agent --lock`, or its timeout passed).
    let locked: Bool
    /// When what it holds is cleared; nil while locked.
    let expiresAt: Date?

    /// The agent answering on the user's socket, or nil when none answers or it cannot be asked
    /// (no `XDG_RUNTIME_DIR`; a socket that is not the user's own, which the commands that sign
    /// through the agent report as an error of their own).
    static func current(environment: [String: String]) -> AgentReport? {
        guard let path = try? KeyAgentSocket.path(environment: environment),
            let answer = try? KeyAgentSocket.exchange(KeyAgentRequest(op: "status"), at: path), answer.ok
        else { return nil }
        return AgentReport(
            path: path, account: answer.account, locked: answer.locked ?? true,
            expiresAt: answer.expiresAt.map { Date(timeIntervalSince1970: $0) })
    }

    /// The `agent:` line of `keyauth status` for the account it serves.
    var summary: String {
        if locked { return "locked (at \(path)); run `keyauth agent` to unlock it" }
        let until = expiresAt.map { " until \(Formatting.timestamp($0))" } ?? ""
        return "holds the key\(until) (at \(path))"
    }

    /// Why a login that needed this account's key could not ask for its PIN, when the agent
    /// for the account is the reason: it runs, but is locked.
    static func explainingLock(_ error: KeyAuthError, account: String, environment: [String: String])
        -> KeyAuthError
    {
        guard let agent = current(environment: environment), agent.account == account, agent.locked else {
            return error
        }
        return KeyAuthError(
            error.code,
            error.message + "; the keyauth agent at \(agent.path) is locked: run `keyauth agent` to unlock it",
            underlying: error.underlying)
    }
}
