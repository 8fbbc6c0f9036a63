import Foundation
import KeyAuthTestSupport

/// A relying party registered with the built `keyauth-server clients add`, as an administrator
/// does it.
struct RegisteredClient {
    let id: String
    /// The secret printed once; nil for a public client.
    let secret: String?

    /// Runs `clients add ARGUMENTS --db DATABASE` and reads the `client_id=` and
    /// `client_secret=` lines it prints.
    ///
    /// - Throws: ``TestFailure`` with the command's error when it fails or prints no id.
    init(adding arguments: [String], database: String) throws {
        let added = try KeyAuthServerProcess.runCommand(["clients", "add"] + arguments + ["--db", database])
        guard added.status == 0 else { throw TestFailure("clients add failed: \(added.error)") }
        var printed: [String: String] = [:]
        for line in added.output.split(separator: "\n") {
            let parts = line.split(separator: "=", maxSplits: 1)
            if parts.count == 2 { printed[String(parts[0])] = String(parts[1]) }
        }
        guard let id = printed["client_id"] else {
            throw TestFailure("clients add printed no client_id: \(added.output)")
        }
        self.id = id
        secret = printed["client_secret"]
    }
}
