import Foundation
import Synchronization
import Testing

@testable import KeyAuthServer

extension StorageContractTests {
    /// What only PostgreSQL has: a URL with a password, a connection pool, a server that can go
    /// away and come back.
    @Suite("PostgreSQL connections")
    struct PostgresConnectionTests {
        @Test("masks the password in every form of URL")
        func masksPasswords() {
            #expect(
                PostgresStorage.redacted("postgres://keyauth:s3cret@db.example:5432/keyauth")
                    == "postgres://keyauth:***@db.example:5432/keyauth")
            #expect(
                PostgresStorage.redacted("postgresql://keyauth@db/keyauth?password=s3cret&sslmode=require")
                    == "postgresql://keyauth@db/keyauth?password=***&sslmode=require")
            #expect(
                PostgresStorage.redacted("postgres://u:p%40ss:word@[::1]:5432/db?Password=x")
                    == "postgres://u:***@[::1]:5432/db?Password=***")
            #expect(PostgresStorage.redacted("postgres://db.example/keyauth") == "postgres://db.example/keyauth")
            #expect(
                PostgresStorage.redacted("host=db password=s3cret dbname=keyauth") == "<PostgreSQL connection string>")

            let location = PostgresLocation("postgres://u:p%40ss@db/x")
            #expect(location.redact("bad token p%40ss and p@ss") == "bad token *** and ***")
            #expect(!"\(location)".contains("p%40ss"))

            // A password libpq would cut (an unencoded "@", "/" or "&") is masked whole all the
            // same, for the message that refuses it; an "@" elsewhere in the query is no password.
            let masked = [
                "postgres://user:p@ss:w%40rd@host/db": "postgres://user:***@host/db",
                "postgres://u:pa/ss@host/db": "postgres://u:***@host/db",
                "postgres://u:p?ss@host/db?sslmode=require": "postgres://u:***@host/db?sslmode=require",
                "postgres://u@h/db?password=a&bc&sslmode=require": "postgres://u@h/db?password=***&***&sslmode=require",
                "postgres://h:5432/db?application_name=a@b": "postgres://h:5432/db?application_name=a@b",
                "postgres://h/db?password=se@cret": "postgres://h/db?password=***",
                // The client key's passphrase, and a keyword libpq decodes to "password".
                "postgres://h/db?sslkey=/k.pem&sslpassword=hunter2": "postgres://h/db?sslkey=/k.pem&sslpassword=***",
                "postgres://h/db?pass%77ord=hunter2&sslmode=require": "postgres://h/db?pass%77ord=***&sslmode=require",
            ]
            for (url, expected) in masked {
                #expect(PostgresStorage.redacted(url) == expected, "\(url)")
            }
        }

        @Test("a URL's options follow the server's own, under a keyword percent-encoded too")
        func urlOptionsFollowOurs() {
            for url in ["postgres://h/db?options=-csearch_path%3Dk", "postgres://h/db?opt%69ons=-csearch_path%3Dk"] {
                let options = PostgresLocation(url).connectionParameters.last { $0.keyword == "options" }?.value
                #expect(options == "-c statement_timeout=30s -c lock_timeout=10s -csearch_path=k", "\(url)")
            }
        }

        @Test("refuses a URL that libpq would cut inside the password, and a keyword/value string, quoting neither")
        func refusesAmbiguousLocations() throws {
            for url in [
                "postgres://user:Qx@Zy:W%40v@host/db", "postgres://u:Qx/Zy@host/db", "postgres://u:Qx@Zy?Wv@host/db",
                "postgres://u@h/db?password=Qx&Zy",
            ] {
                let problem = try #require(PostgresLocation.problem(in: url), "\(url)")
                #expect(!problem.contains("Qx") && !problem.contains("Zy"), "\(problem)")
                #expect {
                    _ = try PostgresStorage(url: url)
                } throws: { error in
                    (error as? StorageError)?.code == .invalidLocation
                        && !"\(error)".contains("Qx") && !"\(error)".contains("Zy")
                }
            }
            for url in [
                "postgres://user:p%40ss%3Aw%40rd@host/db", "postgres://u:p:w@host/db", "postgres://u:p?ss@host/db",
                "postgres://h/db?password=se@cret&sslmode=require", "postgres://db.example/keyauth",
            ] {
                #expect(PostgresLocation.problem(in: url) == nil, "\(url)")
            }
            #expect(PostgresLocation.isKeywordValueString("host=db password=s3cret dbname=keyauth"))
            #expect(PostgresLocation.isKeywordValueString("dbname=keyauth"))
            #expect(!PostgresLocation.isKeywordValueString("/var/lib/keyauth/keyauth-server.db"))
            #expect(!PostgresLocation.isKeywordValueString("./data/mode=fast.db"))
        }

        @Test("reports an unreachable server as unavailable, without the password")
        func reportsUnreachableServer() {
            do {
                _ = try PostgresStorage(url: "postgres://keyauth:s3cret-pw@127.0.0.1:1/keyauth")
                Issue.record("connected to port 1")
            } catch {
                #expect(error.code == .unavailable)
                #expect(!error.description.contains("s3cret-pw"))
                #expect(error.description.contains("postgres://keyauth:***@127.0.0.1:1/keyauth"))
                #expect(error.underlying?.library == "libpq")
            }
        }

        @Test(
            "refuses a wrong password as unavailable, without echoing it",
            .enabled(if: PostgresTestServer.url != nil, "KEYAUTH_TEST_POSTGRES_URL is not set"))
        func refusesWrongPassword() throws {
            let url = try #require(PostgresTestServer.url)
            let wrong = try #require(PostgresTestServer.replacingPassword(in: url, with: "not-the-password-42"))
            do {
                _ = try PostgresStorage(url: wrong)
                Issue.record("connected with a wrong password")
            } catch {
                #expect(error.code == .unavailable)
                #expect(!error.description.contains("not-the-password-42"))
                #expect(error.description.contains("***"))
            }
        }

        @Test(
            "opens PostgreSQL for postgres:// and postgresql:// locations",
            .enabled(if: PostgresTestServer.url != nil, "KEYAUTH_TEST_POSTGRES_URL is not set"))
        func opensThroughTheFactory() throws {
            let url = try #require(PostgresTestServer.url)
            let database = try PostgresTestServer.makeDatabase(url: url)
            defer { database.destroy() }
            let schemaURL = try #require(database.url)
            let rest = try #require(schemaURL.range(of: "://")).upperBound
            for scheme in ["postgres://", "postgresql://", "POSTGRES://"] {
                let storage = try StorageFactory.open(scheme + schemaURL[rest...])
                defer { storage.close() }
                #expect((storage as? SQLStorage)?.dialect == .postgres)
                try storage.healthCheck()
            }
        }

        @Test(
            "a transaction is READ COMMITTED whatever the database's default, so a check after a lock sees what committed meanwhile",
            .enabled(if: PostgresTestServer.url != nil, "KEYAUTH_TEST_POSTGRES_URL is not set"))
        func readCommittedWhateverTheDefault() throws {
            let url = try #require(PostgresTestServer.url)
            let database = try PostgresTestServer.makeDatabase(url: url)
            defer { database.destroy() }
            let schemaURL = try #require(database.url)
            #expect(schemaURL.contains("options="))
            let serializable = schemaURL.replacingOccurrences(
                of: "options=", with: "options=-cdefault_transaction_isolation%3Dserializable%20")
            let storage = try #require(try StorageFactory.open(serializable) as? SQLStorage)
            defer { storage.close() }
            let outside = try storage.database.read { connection throws(StorageError) in
                try connection.query("SHOW transaction_isolation", []) { $0.text(0) }
            }
            #expect(outside == ["serializable"], "the URL's default reached the connection")
            let inside = try storage.database.write { connection throws(StorageError) in
                try connection.transaction { () throws(StorageError) in
                    try connection.query("SHOW transaction_isolation", []) { $0.text(0) }
                }
            }
            #expect(inside == ["read committed"])
        }

        @Test(
            "a migration's statements outlast the client's statement deadline, which other statements keep",
            .enabled(if: PostgresTestServer.url != nil, "KEYAUTH_TEST_POSTGRES_URL is not set"),
            .timeLimit(.minutes(2)))
        func migrationHasNoStatementDeadline() throws {
            let url = try #require(PostgresTestServer.url)
            let database = try PostgresTestServer.makeDatabase(url: url)
            defer { database.destroy() }
            let schemaURL = try #require(database.url)
            try StorageFactory.open(schemaURL).close()
            // Another session holds the migrations' table for 3 s, as a long statement of a
            // migration would keep the next one waiting.
            let blocked = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                defer { blocked.signal() }
                do {
                    let blocker = try PostgresConnection(PostgresLocation(schemaURL))
                    try blocker.execute(
                        "DO $$ BEGIN LOCK TABLE schema_migrations IN ACCESS EXCLUSIVE MODE; PERFORM pg_sleep(3); END $$"
                    )
                } catch {
                    Issue.record("the blocking session failed: \(error)")
                }
            }
            let connection = try PostgresConnection(PostgresLocation(schemaURL), statementDeadlineSeconds: 1)
            let held = """
                SELECT count(*) FROM pg_locks WHERE relation = 'schema_migrations'::regclass
                AND mode = 'AccessExclusiveLock' AND granted
                """
            var waited = 0
            while try connection.execute(held).firstRow?.integer(0) != 1, waited < 200 {
                Thread.sleep(forTimeInterval: 0.01)
                waited += 1
            }
            #expect(waited < 200, "the other session never took its lock")
            try SQLSchema.migrate(connection, now: 1_800_000_000)
            #expect(
                try connection.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").firstRow?.integer(0)
                    == SQLSchema.latestVersion)
            #expect(blocked.wait(timeout: .now() + 30) == .success)
            // Outside a migration the deadline holds.
            #expect {
                try connection.execute("SELECT pg_sleep(2)")
            } throws: { error in
                (error as? StorageError)?.code == .unavailable
            }
        }

        @Test(
            "a write refused by a read-only server is unavailable, and the pool connects afresh for the next",
            .enabled(if: PostgresTestServer.url != nil, "KEYAUTH_TEST_POSTGRES_URL is not set"))
        func reconnectsAfterReadOnlyServer() throws {
            let url = try #require(PostgresTestServer.url)
            let pool = PostgresConnectionPool(location: PostgresLocation(url), size: 1, checkoutTimeoutSeconds: 5)
            defer { pool.close() }
            let write = "CREATE TEMPORARY TABLE written (k INTEGER)"
            // The session turns read-only, as a connection to a primary demoted to a standby
            // finds every write refused with SQLSTATE 25006.
            do {
                try pool.withConnection(retryingIfBroken: false) { connection throws(StorageError) in
                    try connection.execute("SET default_transaction_read_only = on")
                    try connection.execute(write)
                }
                Issue.record("a read-only session took a write")
            } catch {
                #expect(error.code == .unavailable)
                #expect(error.description.contains("25006"), "\(error.description)")
            }
            let after = try pool.withConnection(retryingIfBroken: false) { connection throws(StorageError) in
                try connection.execute(write)
                return try connection.execute("SHOW default_transaction_read_only").firstRow?.text(0)
            }
            #expect(after == "off", "the next caller got the read-only session")
        }

        @Test(
            "serve's storage keeps the connections --db-connections asks for",
            .enabled(if: PostgresTestServer.url != nil, "KEYAUTH_TEST_POSTGRES_URL is not set"))
        func servingPoolSize() throws {
            let url = try #require(PostgresTestServer.url)
            let database = try PostgresTestServer.makeDatabase(url: url)
            defer { database.destroy() }
            let schemaURL = try #require(database.url)
            for size in [PostgresStorage.defaultPoolSize, 9] {
                let (storage, lock) = try StorageFactory.openForServing(
                    schemaURL, alone: false, postgresConnections: size)
                defer { storage.close() }
                #expect(lock == nil)
                let pool = (storage as? SQLStorage)?.database as? PostgresConnectionPool
                #expect(pool?.size == size)
            }
        }

        @Test(
            "retries a broken read on a fresh connection, never a broken write",
            .enabled(if: PostgresTestServer.url != nil, "KEYAUTH_TEST_POSTGRES_URL is not set"))
        func retriesOnlyReads() throws {
            let url = try #require(PostgresTestServer.url)
            let pool = PostgresConnectionPool(location: PostgresLocation(url), size: 1, checkoutTimeoutSeconds: 5)
            defer { pool.close() }
            // The statement kills its own server process: the connection breaks mid-call, the
            // one case the checkout test cannot see coming.
            let calls = Counter()
            let value = try pool.withConnection(retryingIfBroken: true) { connection throws(StorageError) in
                let first = calls.increment() == 1
                return try connection.execute(first ? "SELECT pg_terminate_backend(pg_backend_pid())" : "SELECT 42")
                    .firstRow?.integer(0)
            }
            #expect(value == 42)
            #expect(calls.value == 2)

            let writes = Counter()
            do {
                try pool.withConnection(retryingIfBroken: false) { connection throws(StorageError) in
                    _ = writes.increment()
                    try connection.execute("SELECT pg_terminate_backend(pg_backend_pid())")
                }
                Issue.record("a write on a broken connection reported success")
            } catch {
                #expect(error.code == .unavailable)
            }
            #expect(writes.value == 1)
            // The pool repairs the connection on the next checkout.
            let after = try pool.withConnection(retryingIfBroken: false) { connection throws(StorageError) in
                try connection.execute("SELECT 7").firstRow?.integer(0)
            }
            #expect(after == 7)
        }

        @Test(
            "reconnects by itself after the server terminated its idle connections",
            .enabled(if: PostgresTestServer.url != nil, "KEYAUTH_TEST_POSTGRES_URL is not set"))
        func reconnectsAfterTermination() throws {
            let url = try #require(PostgresTestServer.url)
            let database = try PostgresTestServer.makeDatabase(url: url)
            defer { database.destroy() }
            let storage = try database.open()
            defer { storage.close() }
            // Open every pooled connection (checkouts go round the pool), then kill them all and
            // wait until their server processes have exited (a write racing the termination
            // itself would rightly fail: it may have been sent to a dying process).
            for index in 0..<8 {
                #expect(try storage.claimJTI(keyID: "kid", jti: "warm-\(index)", expiresAt: 100))
            }
            try database.execute(
                """
                SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity
                WHERE application_name = current_setting('application_name') AND pid <> pg_backend_pid()
                """)
            // Writes are not retried, so each one succeeding shows the dead connection was
            // found and replaced at checkout, before the write was sent.
            for index in 0..<8 {
                #expect(try storage.claimJTI(keyID: "kid", jti: "after-\(index)", expiresAt: 100))
            }
            #expect(try !storage.claimJTI(keyID: "kid", jti: "warm-0", expiresAt: 100))
        }

        @Test(
            "fails while the database is down and recovers by itself, losing nothing acknowledged",
            .enabled(
                if: PostgresTestServer.url != nil && PostgresTestServer.controlCommand != nil,
                "KEYAUTH_TEST_POSTGRES_URL or KEYAUTH_TEST_POSTGRES_CTL is not set"))
        func survivesAnOutage() throws {
            let url = try #require(PostgresTestServer.url)
            let database = try PostgresTestServer.makeDatabase(url: url)
            defer { database.destroy() }
            let storage = try database.open()
            defer { storage.close() }
            var acknowledged = StorageContract.device("kid-1", status: .active)
            acknowledged.lastLoginAt = 1_234
            #expect(try storage.insertDevice(acknowledged))
            for index in 0..<8 {
                #expect(try storage.claimJTI(keyID: "kid-1", jti: "before-\(index)", expiresAt: 100))
            }

            try PostgresTestServer.control("stop")
            var restarted = false
            defer { if !restarted { try? PostgresTestServer.control("start") } }

            #expect(StorageContract.errorCode { () throws(StorageError) in try storage.healthCheck() } == .unavailable)
            #expect(
                StorageContract.errorCode { () throws(StorageError) in _ = try storage.device(kid: "kid-1") }
                    == .unavailable)
            #expect(
                StorageContract.errorCode { () throws(StorageError) in
                    _ = try storage.claimJTI(keyID: "kid-1", jti: "during", expiresAt: 100)
                } == .unavailable)

            try PostgresTestServer.control("start")
            restarted = true
            // Wait with a connection of our own, so that the pool's connections are all still
            // the dead ones when the writes below check them out.
            let deadline = ContinuousClock.now + .seconds(30)
            while !PostgresTestServer.isAccepting(url: url), ContinuousClock.now < deadline {
                Thread.sleep(forTimeInterval: 0.2)
            }
            for index in 0..<8 {
                #expect(try storage.claimJTI(keyID: "kid-1", jti: "after-\(index)", expiresAt: 100))
            }
            try storage.healthCheck()
            #expect(try storage.device(kid: "kid-1") == acknowledged)
            for index in 0..<8 {
                #expect(try !storage.claimJTI(keyID: "kid-1", jti: "before-\(index)", expiresAt: 100))
            }
        }

        @Test(
            "a server process that stops answering costs a statement its deadline, then the connection is rebuilt",
            .enabled(if: PostgresTestServer.url != nil, "KEYAUTH_TEST_POSTGRES_URL is not set"),
            .timeLimit(.minutes(10)))
        func stoppedServerProcess() throws {
            let url = try #require(PostgresTestServer.url)
            let connection = try PostgresConnection(PostgresLocation(url), statementDeadlineSeconds: 2)
            #expect(connection.isOpen)
            let backend = try #require(try connection.execute("SELECT pg_backend_pid()").firstRow?.integer(0))
            // The process serving this connection stops; its host's TCP stack still answers, as
            // for a process stuck on a dead disk. Without the deadline the statement waits for
            // ever, and the time limit above fails the test.
            try #require(kill(pid_t(backend), SIGSTOP) == 0, "cannot stop PostgreSQL's process \(backend)")
            var resumed = false
            defer { if !resumed { kill(pid_t(backend), SIGCONT) } }
            #expect {
                try connection.execute("SELECT 1")
            } throws: { error in
                let error = error as? StorageError
                let message = error?.message ?? ""
                return error?.code == .unavailable && message.contains("did not answer a statement within 2 s")
            }
            #expect(!connection.isOpen, "the connection is not handed out again mid-statement")
            kill(pid_t(backend), SIGCONT)
            resumed = true
            #expect(connection.reset())
            #expect(try connection.execute("SELECT 1").firstRow?.integer(0) == 1)
            #expect(try connection.execute("SELECT pg_backend_pid()").firstRow?.integer(0) != backend)
        }

    }
}

/// A thread-safe call counter.
private final class Counter: Sendable {
    private let count = Mutex(0)

    /// Adds one; returns the new count.
    func increment() -> Int {
        count.withLock {
            $0 += 1
            return $0
        }
    }

    var value: Int { count.withLock { $0 } }
}
