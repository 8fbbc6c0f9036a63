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
/// 2-digit code (3 digits when the server finds 2 spelled out beside its prompt), the module
/// shows it (with the host's name), the device shows only who asks ("log in to host NAME") and
/// the user types the code there, so a user approving by habit cannot approve a login someone
/// else started. The server decides whether the user may log in
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

    /// Codes tried when the server finds one spelled out beside its prompt.
    static let codeAttempts = 8

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
    /// The code of each attempt (``randomCode(attempt:)``; a test gives its own).
    var codes: @Sendable (_ attempt: Int) -> String = PushLogin.randomCode

    /// Asks, shows the code and waits for the answer; the answer is final.
    func run() async -> PAMHelper.Answer {
        let secret = KeyAuthClient.ClientSecret(id: credentials.clientID, secret: credentials.clientSecret)
        let started: KeyAuthClient.BackchannelRequest
        let code: String
        switch await start(secret) {
        case .started(let request, let shown):
            started = request
            code = shown
        case .ended(let answer): return answer
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

    /// How ``start(_:)`` ended: a request open with its code, or the login's answer.
    enum Start: Sendable {
        case started(KeyAuthClient.BackchannelRequest, code: String)
        case ended(PAMHelper.Answer)
    }

    /// Opens the sign-in request with a code of ``codes``. The server refuses a code that what
    /// the device shows beside it spells out (the host's name, its address: PROTOCOL.md section
    /// 8), so that nobody types it from the prompt by habit; another code is tried then, up to
    /// ``codeAttempts``.
    func start(_ secret: KeyAuthClient.ClientSecret) async -> Start {
        for attempt in 0..<Self.codeAttempts {
            let code = codes(attempt)
            do {
                let started = try await client.startBackchannelSignIn(
                    client: secret, user: keyauthUser, bindingMessage: code)
                return .started(started, code: code)
            } catch {
                let spelledOut = (error.underlying as? OAuthError)?.error == .invalidBindingMessage
                guard spelledOut, attempt + 1 < Self.codeAttempts else { return .ended(PAMHelper.answer(for: error)) }
            }
        }
        return .ended(.refused("push login: the server took none of the codes"))
    }

    /// A random code for attempt `attempt`: 2 digits, then 3 (which fewer texts hold) for the
    /// second half of the attempts.
    static func randomCode(attempt: Int) -> String {
        String(attempt < codeAttempts / 2 ? Int.random(in: 10...99) : Int.random(in: 100...999))
    }

    /// The `wait SECONDS TEXT` line of docs/PROTOCOL.md section 7.2: what the module shows, and
    /// how long it waits for the final answer.
    static func waitLine(seconds: Int, host: String, user: String, code: String) -> String {
        "wait \(seconds) keyauth: to log in to \(host) as \(user), approve on your device "
            + "(keyauth approve) and type the code \(code)"
    }
}
