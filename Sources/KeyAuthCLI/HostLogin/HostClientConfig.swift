import Foundation
import KeyAuth

#if canImport(Glibc)
    import Glibc
#endif

/// The host's own credentials as a client of keyauth-server, from `/etc/keyauth/pam.conf`:
/// what lets `keyauth-pam-helper` start a push login (docs/HOST-LOGIN.md).
///
/// The file is what `keyauth-server clients add HOST --kind host` prints: `client_id=ID` and
/// `client_secret=SECRET` lines, `#` comments. Whoever reads the secret can ask any allowed user
/// to approve a login to this host, so the file must be a regular file of root's that nobody else
/// may read or write; anything looser is refused, not used.
struct HostClientConfig: Equatable {
    /// The file read when the request names none.
    static let defaultPath = "/etc/keyauth/pam.conf"

    let clientID: String
    let clientSecret: String

    init(clientID: String, clientSecret: String) {
        self.clientID = clientID
        self.clientSecret = clientSecret
    }

    /// Reads `path`; nil when there is no such file (the host is not a client: no push login).
    ///
    /// - Throws: `.keyUnprotected` for a symbolic link, a file that is not root's, or one with
    ///   any group or other permission; `.invalidArgument` for a malformed file;
    ///   `.storageFailed` when it cannot be read.
    static func load(path: String) throws(KeyAuthError) -> HostClientConfig? {
        guard var bytes = try RootFile.read(path, private: true) else { return nil }
        defer { CryptoPrimitives.wipe(&bytes) }
        return try HostClientConfig(text: String(decoding: bytes, as: UTF8.self), path: path)
    }

    /// Parses the text of a configuration file; `path` only names it in errors.
    init(text: String, path: String) throws(KeyAuthError) {
        var values: [String: String] = [:]
        for (index, line) in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated() {
            let content = line.trimmingCharacters(in: .whitespaces)
            guard !content.isEmpty, !content.hasPrefix("#") else { continue }
            let parts = content.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2, ["client_id", "client_secret"].contains(parts[0]), values[parts[0]] == nil,
                !parts[1].isEmpty
            else {
                // The line may hold the secret: its number is enough.
                throw KeyAuthError(
                    .invalidArgument,
                    "\(path) line \(index + 1): expected client_id=ID or client_secret=SECRET, once each")
            }
            values[parts[0]] = parts[1]
        }
        guard let id = values["client_id"], let secret = values["client_secret"] else {
            throw KeyAuthError(.invalidArgument, "\(path) needs a client_id= and a client_secret= line")
        }
        clientID = id
        clientSecret = secret
    }
}
