import Foundation
import KeyAuthTestSupport
import Testing

extension PostgresTestServer {
    /// Runs `body` with two `keyauth-server serve` processes of the built binary, `A` and `B`, on
    /// a fresh schema of ``url``, as two instances of one deployment behind a load balancer; then
    /// stops them, expecting each to exit with 0, and drops the schema.
    ///
    /// - Parameters:
    ///   - issuer: the `--issuer` of both, as every instance of one deployment must name the same.
    ///   - startingAtOnce: launch both back to back before waiting for either; otherwise `B` is
    ///     launched only once `A` listens, so that a test does not depend on how two servers
    ///     settle the signing key on an empty database (unless that is what it tests).
    ///   - extraArguments: more `serve` options for both (`--cleanup-interval 1`).
    ///   - environmentOfB: variables added to `B`'s environment only (libfaketime's, to run it
    ///     with a clock that differs from `A`'s and the database's).
    ///   - body: gets the processes, both listening (their `port` known), and the URL of the
    ///     schema they use, for admin commands' `--db` and storage the test opens itself.
    /// - Throws: when `KEYAUTH_TEST_POSTGRES_URL` is unset or a server does not come up.
    static func withServerProcesses(
        issuer: String, startingAtOnce: Bool = false, extraArguments: [String] = [],
        environmentOfB: [String: String] = [:], _ body: ([KeyAuthServerProcess], String) throws -> Void
    ) throws {
        let url = try #require(Self.url)
        let database = try makeDatabase(url: url)
        defer { database.destroy() }
        let schemaURL = try #require(database.url)
        let directory = TemporaryDirectory("keyauth-servers")
        defer { directory.remove() }

        var servers: [KeyAuthServerProcess] = []
        // Stopped before the schema is dropped (defers run last first).
        defer {
            for server in servers {
                let status = server.terminate()
                #expect(status == 0, "server \(server.name) exited with \(status): \(server.log)")
            }
        }
        for name in ["A", "B"] {
            let server = try KeyAuthServerProcess(
                name: name, database: schemaURL, issuer: issuer, logPath: "\(directory.path)/\(name).log",
                extraArguments: extraArguments, extraEnvironment: name == "B" ? environmentOfB : [:])
            servers.append(server)
            if !startingAtOnce { try server.waitUntilListening() }
        }
        for server in servers { try server.waitUntilListening() }
        try body(servers, schemaURL)
    }
}
