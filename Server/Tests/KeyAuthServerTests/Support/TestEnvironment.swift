import Foundation
import KeyAuth
import KeyAuthServer
import KeyAuthTestSupport

/// A temporary database, a test clock and ways to build a server on them.
final class TestEnvironment: Sendable {
    /// The issuer used by direct (socket-less) tests.
    static let issuer = "https://keyauth.test"

    let directory: TemporaryDirectory
    let databasePath: String
    let clock: TestClock

    /// - Parameter clockStart: the test clock's start; a fixed date by default, the real time
    ///   for tests that mix in commands running on the real clock.
    init(clockStart: Int64 = 1_800_000_000) {
        directory = TemporaryDirectory("keyauth-server")
        databasePath = directory.path + "/keyauth-server.db"
        clock = TestClock(clockStart)
    }

    deinit {
        directory.remove()
    }

    /// A configuration for tests: port 0 on loopback, 2048-bit keys, no request log, and open
    /// enrollment (not the default), so that a test's first device needs no code unless the
    /// test sets `.code` to check codes.
    func configuration(_ configure: (inout ServerConfiguration) -> Void = { _ in }) throws -> ServerConfiguration {
        var configuration = ServerConfiguration(listen: try ListenAddress(parsing: "127.0.0.1:0"))
        configuration.database = databasePath
        configuration.enrollment = .open
        configuration.signingKeyBits = 2048
        configuration.logRequests = false
        configuration.threads = 2
        configure(&configuration)
        return configuration
    }

    /// Opens the database, seeding the shared server signing key so no test waits for one.
    func openStorage() throws -> SQLiteStorage {
        try seedSigningKey(SQLiteStorage(path: databasePath, now: clock.closure))
    }

    /// `storage`, after storing the shared server signing key in it unless it has a key.
    func seedSigningKey<Storage: ServerStorage>(_ storage: Storage) throws -> Storage {
        if try storage.signingKeys().isEmpty {
            let key = try ServerTestKeys.key("server")
            _ = try storage.insertSigningKey(
                kid: key.publicKey.fingerprint, privatePEM: try ServerTestKeys.serverKeyPEM(), createdAt: clock.now)
        }
        return storage
    }

    /// A responder on a fresh storage, and the storage.
    func makeResponder(
        _ configure: (inout ServerConfiguration) -> Void = { _ in }
    ) throws -> (KeyAuthResponder, SQLiteStorage) {
        let storage = try openStorage()
        let responder = try KeyAuthResponder(
            configuration: try configuration(configure), issuer: Self.issuer, storage: storage, log: SilentLog(),
            now: clock.closure)
        return (responder, storage)
    }

    /// A test API that talks to a responder directly.
    func directAPI(_ configure: (inout ServerConfiguration) -> Void = { _ in }) throws -> TestAPI {
        let (responder, storage) = try makeResponder(configure)
        return TestAPI(
            transport: DirectTransport(responder: responder), issuer: Self.issuer, clock: clock, storage: storage)
    }

    /// A real server on 127.0.0.1, port 0, with the default issuer (which names the bound port).
    ///
    /// - Parameter storage: the server's storage; by default ``openStorage()``.
    func startServer(
        storage: (any ServerStorage)? = nil, _ configure: (inout ServerConfiguration) -> Void = { _ in }
    ) throws -> ServerRunner {
        let seeded: any ServerStorage = try storage.map { try seedSigningKey($0) } ?? openStorage()
        return try ServerRunner(
            configuration: try configuration(configure), storage: seeded, log: SilentLog(), now: clock.closure)
    }

    /// A test API that talks to `runner` over sockets.
    func socketAPI(_ runner: ServerRunner) -> TestAPI {
        TestAPI(
            transport: SocketTransport(port: runner.port), issuer: runner.issuer, clock: clock, storage: runner.storage)
    }
}
