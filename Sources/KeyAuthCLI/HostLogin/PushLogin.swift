import Foundation
import KeyAuth

#if canImport(Glibc)
    import Glibc
#endif

/// Push login (docs/HOST-LOGIN.md, mode 2): the host, as a client of keyauth-server with the
/// credentials of `/etc/keyauth/pam.conf`, asks the user to approve the login on one of their
/// devices, shows the code to type there, and waits for the answer.
///
/// It is CIBA in poll mode (PROTOCOL.md section 8) with number matching: the helper makes the
/// 2-digit code, the module shows it (with the host's name), the device shows only who asks
/// ("log in to host NAME") and the user types the code there, so a user approving by habit
/// cannot approve a login someone else started. The server decides whether the user may log in
/// to this host at all. Every failure (refused, denied, expired, unreachable, malformed) ends in
/// a refusal: nothing here says yes but the server's token.
package struct PushLogin: Sendable {
    /// Which login `pam_keyauth` asks for (`mode=`).
    package enum Mode: String, Sendable {
        /// The device key on this host when the user has one there, else push when the host is a
        /// client (it has `pam.conf`).
        case auto
        /// The device key on this host only.
        case local
        /// Push only.
        case push
    }

    /// Seconds added to the wait after each `slow_down` (CIBA section 11).
    static let slowDownStep = 5

    let client: KeyAuthClient
    let credentials: HostClientConfig
    /// The keyauth user the Linux user maps to: who is asked.
    let keyauthUser: String
    /// The Linux user who logs in, for the message.
    let linuxUser: String
    /// Writes one line to the module.
    let send: @Sendable (String) -> Void
    /// Whether the module has gone (its end of the socket closed: the person pressed Ctrl-C, or
    /// sshd ended the connection), so that no helper keeps polling for a login nobody waits for.
    let moduleGone: @Sendable () -> Bool

    /// Asks, shows the code and waits for the answer; the answer is final.
    func run() async -> PAMHelper.Answer {
        let code = String(Int.random(in: 10...99))
        let secret = KeyAuthClient.ClientSecret(id: credentials.clientID, secret: credentials.clientSecret)
        let started: KeyAuthClient.BackchannelRequest
        do {
            started = try await client.startBackchannelSignIn(client: secret, user: keyauthUser, bindingMessage: code)
        } catch {
            return PAMHelper.answer(for: error)
        }
        send(Self.waitLine(seconds: started.expiresIn, host: PAMHelper.hostName(), user: linuxUser, code: code))
        var interval = started.interval
        // The server's expiry, plus a poll's worth: the server says expired_token, this is the backstop.
        let deadline = ContinuousClock.now + .seconds(started.expiresIn + interval)
        while ContinuousClock.now < deadline {
            try? await Task.sleep(for: .seconds(interval))
            if moduleGone() { return .refused("push login abandoned: pam_keyauth is no longer waiting") }
            let outcome: KeyAuthClient.BackchannelOutcome
            do {
                outcome = try await client.pollBackchannelSignIn(id: started.id, client: secret)
            } catch {
                return PAMHelper.answer(for: error)
            }
            switch outcome {
            case .pending: continue
            case .slowDown: interval += Self.slowDownStep
            case .approved: return .ok("push login of \(keyauthUser) approved on a device")
            case .denied(let reason): return .refused("push login denied: \(reason)")
            case .expired: return .refused("push login not approved before the request expired")
            }
        }
        return .refused("push login not approved before the request expired")
    }

    /// The `wait SECONDS TEXT` line of docs/PROTOCOL.md section 7.2: what the module shows, and
    /// how long it waits for the final answer.
    static func waitLine(seconds: Int, host: String, user: String, code: String) -> String {
        "wait \(seconds) keyauth: to log in to \(host) as \(user), approve on your device "
            + "(keyauth approve) and type the code \(code)"
    }
}
