import Foundation
import KeyAuth

/// What `pam_keyauth.so` asks of `keyauth-pam-helper`: one line `key value` per field after the
/// version line `keyauth-pam 1`, ended by an empty line (docs/PROTOCOL.md, "Host login").
///
/// The module sends its arguments as they are and leaves every check to this side, so that the
/// C code stays small; a request that breaks the contract is refused here, never guessed at.
package struct PAMHelperRequest: Sendable, Equatable {
    /// The Linux user PAM authenticates.
    package var user: String
    /// The PAM service (`sudo`, `sshd`, `login`), for the journal.
    package var service: String
    /// The server whose accounts may log in, from root's module arguments.
    package var server: String
    /// The keyauth home template (`~/` the user's home directory, `%u` the user name), if given.
    package var home: String?
    /// The mapping file of Linux users to keyauth users, if not the default.
    package var users: String?
    /// The TCTI of TPM-held keys, if not the kernel's resource manager.
    package var tcti: String?
    /// Which login to make (`mode=`): the device key here, a push approval, or the first that
    /// applies (``PushLogin``).
    package var mode: PushLogin.Mode = .auto
    /// The host's client credentials file for push login, if not the default.
    package var hostConfig: String?
    /// Whether an offline grant may log the user in when the server cannot be reached (`offline`,
    /// `yes` unless the module has `offline=no`).
    package var allowsOffline: Bool
    /// Whether root's module arguments accept a plain `http://` server on loopback
    /// (`insecure_http`). Without it only `https://` is: on plain http, anyone who can bind the
    /// port while the server is down (any local user, above port 1024) would be the server, and
    /// its "token" the proof of a login.
    package var allowsInsecureHTTP = false

    /// Seconds the module waits for an answer once it sent the PIN (its `timeout=`, 1 to 120; 10
    /// when a module from before this field sends none): the helper's work after the PIN, the
    /// grant's renewal included, must fit in it, or the module gives up on a login that passed.
    package var answerTimeout = 10

    /// The longest request accepted, so that a broken module cannot make the helper read for ever.
    package static let maximumLength = 8192

    /// Parses a request.
    ///
    /// - Throws: `.invalidArgument` naming what is wrong: another version, an unknown or repeated
    ///   field, a missing `user` or `server`.
    package init(text: String) throws(KeyAuthError) {
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        while lines.last == "" { lines.removeLast() }
        guard lines.first == "keyauth-pam 1" else {
            throw KeyAuthError(.invalidArgument, "the request is not version 1 of the pam_keyauth contract")
        }
        var fields: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let space = line.firstIndex(of: " ") else {
                throw KeyAuthError(.invalidArgument, "the request has a line without a value")
            }
            let key = String(line[..<space])
            guard
                [
                    "user", "service", "server", "home", "users", "tcti", "mode", "hostconf", "offline",
                    "insecure-http", "timeout",
                ].contains(key)
            else {
                throw KeyAuthError(.invalidArgument, "the request has an unknown field \(key)")
            }
            guard fields[key] == nil else {
                throw KeyAuthError(.invalidArgument, "the request repeats the field \(key)")
            }
            fields[key] = String(line[line.index(after: space)...])
        }
        guard let user = fields["user"], !user.isEmpty else {
            throw KeyAuthError(.invalidArgument, "the request names no user")
        }
        guard let server = fields["server"], !server.isEmpty else {
            throw KeyAuthError(.invalidArgument, "the module has no server= argument")
        }
        self.user = user
        self.service = fields["service"] ?? "unknown"
        self.server = server
        self.home = fields["home"]
        self.users = fields["users"]
        self.tcti = fields["tcti"]
        if let mode = fields["mode"] {
            guard let chosen = PushLogin.Mode(rawValue: mode) else {
                throw KeyAuthError(.invalidArgument, "mode= must be auto, local or push")
            }
            self.mode = chosen
        }
        self.hostConfig = fields["hostconf"]
        switch fields["offline"] {
        case nil, "yes": self.allowsOffline = true
        case "no": self.allowsOffline = false
        default: throw KeyAuthError(.invalidArgument, "the request's offline is neither yes nor no")
        }
        if let timeout = fields["timeout"] {
            guard let seconds = Int(timeout), (1...120).contains(seconds) else {
                throw KeyAuthError(.invalidArgument, "the request's timeout is not 1 to 120 seconds")
            }
            self.answerTimeout = seconds
        }
        switch fields["insecure-http"] {
        case nil: break
        case "yes": self.allowsInsecureHTTP = true
        default: throw KeyAuthError(.invalidArgument, "the request's insecure-http is not yes")
        }
        guard server.lowercased().hasPrefix("https://") || allowsInsecureHTTP else {
            throw KeyAuthError(
                .invalidArgument,
                "server= must be https://: on plain http, any local user who binds the port while the server is down "
                    + "answers for it; add insecure_http to the module's arguments only on a test machine")
        }
        // Even a test machine's: across a network, whoever is on the path would answer for it.
        if !server.lowercased().hasPrefix("https://") {
            guard let host = URLComponents(string: server)?.host, KeyAuthClient.isLoopbackHost(host) else {
                throw KeyAuthError(
                    .invalidArgument, "insecure_http accepts a plain http server= only on this host (loopback)")
            }
        }
    }
}
