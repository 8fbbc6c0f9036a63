import Foundation
import KeyAuth
import KeyAuthServer
import KeyAuthTestSupport
import Testing

/// The server on a disk that fills up: requests that must write fail closed with 503, and
/// `/healthz` says so too, so that a load balancer takes the instance out until space is freed
/// (issue 20, item 9: `/healthz` answered `ok` while every registration failed).
@Suite("A full disk")
struct FullDiskTests {
    /// `GET /healthz` until it answers `status`, for at most `seconds`; the last answer.
    private func health(_ api: TestAPI, becoming status: Int, within seconds: Double) throws -> HTTPResponse {
        let deadline = Date().addingTimeInterval(seconds)
        while true {
            let response = try api.send("GET", "/healthz")
            if response.status == status || Date() >= deadline { return response }
            usleep(100_000)
        }
    }

    @Test(
        "the built server on a full tmpfs: logins and registrations fail with 503, and so does /healthz until space is freed",
        .enabled(if: SmallDisk.canMount, "mounting a tmpfs needs root"), .timeLimit(.minutes(5)))
    func fullDisk() throws {
        let disk = try SmallDisk(megabytes: 4)
        defer { disk.unmount() }
        // The test's own files, and the server's log, stay off the small disk.
        let environment = TestEnvironment(clockStart: ServerClock.now())
        let server = try KeyAuthServerProcess(
            name: "full-disk",
            arguments: [
                "serve", "--listen", "127.0.0.1:0", "--db", disk.path + "/keyauth-server.db", "--enrollment", "open",
                // Logins must write to fail on a full disk: the replay cache in the database.
                "--replay-cache", "database",
                "--metrics-listen", "off", "--log-format", "json", "--rate-limit", "100000", "--registration-limit",
                "100000", "--signing-key-bits", "2048",
            ], logPath: environment.directory.path + "/server.log")
        defer { server.terminate() }
        try server.waitUntilListening()
        // Requests go over the socket; the API's storage (a database of its own) is not used.
        let api = TestAPI(server: server, clock: environment.clock, storage: try environment.openStorage())
        let alice = try ServerTestKeys.key("alice-1")
        #expect(try api.register(user: "alice", key: alice).status == 201)
        #expect(try api.send("GET", "/healthz").status == 200)

        try disk.fill()
        // Each login stores its assertion's jti. Writes fail at first only while SQLite's log is
        // full, until a checkpoint empties it; once the database itself must grow, the
        // checkpoint fails too, and every write fails: 20 refused logins in a row, 2 s apart in
        // all, are that state.
        var refusedInARow = 0
        var logins = 0
        while refusedInARow < 20 && logins < 5000 {
            logins += 1
            let login = try api.login(alice)
            guard login.status != 200 else {
                refusedInARow = 0
                continue
            }
            #expect(login.status == 503)
            #expect(login.errorCode == "temporarily_unavailable")
            refusedInARow += 1
            usleep(100_000)
        }
        #expect(refusedInARow == 20, "logins still succeed on a full disk after \(logins)")
        let registration = try api.register(user: "bob", key: try ServerTestKeys.key("bob-1"))
        #expect(registration.status == 503)

        let unhealthy = try health(api, becoming: 503, within: 5)
        #expect(unhealthy.status == 503)
        #expect(unhealthy.json?["status"] == "unhealthy")
        #expect(unhealthy.json?["check"] == "storage_write")
        #expect(unhealthy.errorCode == "temporarily_unavailable")
        #expect(unhealthy.headers["Retry-After"] == "5")
        // The native error (SQLite's "database or disk is full") is for the log, not the answer.
        #expect(!unhealthy.text.lowercased().contains("sqlite"))

        disk.free()
        let healthy = try health(api, becoming: 200, within: 10)
        #expect(healthy.status == 200)
        #expect(healthy.json == .object(["status": "ok"]))
        #expect(try api.register(user: "bob", key: try ServerTestKeys.key("bob-1")).status == 201)
        #expect(try api.login(alice).status == 200)
        #expect(server.terminate() == 0)

        // The log says what the clients got, and when /healthz began and stopped failing.
        let lines = try server.log.split(separator: "\n").filter { $0.hasPrefix("{") }.map { line in
            try #require(try JSONValue(parsing: String(line)).objectValue)
        }
        let registrations = lines.filter { $0["path"] == "/v1/devices" }.map { $0["status"] }
        #expect(registrations == [.integer(201), .integer(503), .integer(201)])
        let refusedLogins = lines.filter { $0["path"] == "/oauth/token" && $0["status"] == .integer(503) }
        #expect(refusedLogins.count >= 20)
        #expect(refusedLogins.allSatisfy { $0["error"] == "temporarily_unavailable" })
        let messages = lines.compactMap { line in line["level"].map { ($0, line["message"]?.stringValue ?? "") } }
        #expect(
            messages.contains {
                $0.0 == "error" && $0.1.hasPrefix("/healthz: storage_write failing: ") && $0.1.contains("full")
            })
        #expect(messages.contains { $0 == ("notice", "/healthz: storage_write passes again") })
        // And why each refused request was refused, whether it failed while answering or when
        // its write was committed.
        #expect(
            messages.contains { $0.0 == "error" && $0.1.hasPrefix("POST /v1/devices: ") && $0.1.contains("full") },
            "\(messages)")
        #expect(messages.contains { $0.0 == "error" && $0.1.hasPrefix("POST /oauth/token: ") })
    }
}
