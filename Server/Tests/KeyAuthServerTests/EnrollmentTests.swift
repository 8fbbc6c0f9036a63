import Foundation
import Glibc
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

@Suite("Enrollment codes")
struct EnrollmentTests {
    @Test("with --enrollment code a first device needs a code: none or a wrong one gives 403 access_denied")
    func codeRequired() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI { $0.enrollment = .code }
        let key = try ServerTestKeys.key("alice-1")
        let missing = try api.register(user: "alice", key: key)
        #expect(missing.status == 403)
        #expect(missing.errorCode == "access_denied")
        _ = try EnrollmentCodes(storage: api.storage, now: environment.clock.closure).issue(for: "alice")
        let wrong = try api.register(user: "alice", key: key, code: "AAAAAAAAAAAAAAAAAAAAAA")
        #expect(wrong.status == 403)
        #expect(wrong.errorCode == "access_denied")
        #expect(try api.storage.allDevices().isEmpty)
    }

    @Test("a code works once, for its user only, and expires after 15 minutes")
    func singleUseOwnUser() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI { $0.enrollment = .code }
        let codes = EnrollmentCodes(storage: api.storage, now: environment.clock.closure)
        let aliceCode = try codes.issue(for: "alice")
        #expect(EnrollmentCodes.canonical(aliceCode) == aliceCode)

        let bob = try ServerTestKeys.key("bob-1")
        let stolen = try api.register(user: "bob", key: bob, code: aliceCode)
        #expect(stolen.status == 403)
        #expect(stolen.errorCode == "access_denied")

        #expect(try api.register(user: "alice", key: try ServerTestKeys.key("alice-1"), code: aliceCode).status == 201)
        let reused = try api.register(user: "alice", key: try ServerTestKeys.key("alice-2"), code: aliceCode)
        #expect(reused.status == 403)
        #expect(reused.errorCode == "access_denied")

        let late = try codes.issue(for: "bob")
        environment.clock.advance(by: 900)
        #expect(try api.register(user: "bob", key: bob, code: late).errorCode == "access_denied")
    }

    @Test("only the code's hash is stored")
    func onlyHashStored() throws {
        let environment = TestEnvironment()
        let storage = try environment.openStorage()
        let code = try EnrollmentCodes(storage: storage, now: environment.clock.closure).issue(for: "alice")
        #expect(
            try storage.consumeEnrollmentCode(hash: Array(code.utf8), user: "alice", now: environment.clock.now)
                == false)
        #expect(
            try storage.consumeEnrollmentCode(
                hash: CryptoPrimitives.sha256(Array(code.utf8)), user: "alice", now: environment.clock.now))
        storage.close()
        let file = try #require(FileManagerLite.contents(of: environment.databasePath))
        #expect(!file.containsSubsequence(Array(code.utf8)))
    }

    @Test("an existing user's new device with a valid code is active at once (201), without approval")
    func codeSkipsApproval() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        _ = try api.activeDevice(user: "alice", key: try ServerTestKeys.key("alice-1"))
        let code = try EnrollmentCodes(storage: api.storage, now: environment.clock.closure).issue(for: "alice")
        let response = try api.register(user: "alice", key: try ServerTestKeys.key("alice-2"), code: code)
        #expect(response.status == 201)
        #expect(response.json?["status"]?.stringValue == "active")
    }

    @Test("in code mode an existing user's new device without a code still waits for approval (202)")
    func codeModeExistingUser() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI { $0.enrollment = .code }
        let codes = EnrollmentCodes(storage: api.storage, now: environment.clock.closure)
        #expect(
            try api.register(user: "alice", key: try ServerTestKeys.key("alice-1"), code: try codes.issue(for: "alice"))
                .status == 201)
        #expect(try api.register(user: "alice", key: try ServerTestKeys.key("alice-2")).status == 202)
    }

    @Test("a user whose devices were all revoked gets a new one only with a code, even under open enrollment")
    func revokedUserNeedsCode() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI { $0.enrollment = .open }
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        #expect(try api.authorized("DELETE", "/v1/devices/\(laptop.publicKey.fingerprint)", token: token).status == 204)

        let stranger = try ServerTestKeys.key("stranger")
        let taken = try api.register(user: "alice", key: stranger)
        #expect(taken.status == 403)
        #expect(taken.errorCode == "access_denied")
        #expect(taken.errorDescription?.contains("enrollment code") == true)
        #expect(try api.storage.device(kid: stranger.publicKey.fingerprint) == nil)

        let code = try EnrollmentCodes(storage: api.storage, now: environment.clock.closure).issue(for: "alice")
        let phone = try ServerTestKeys.key("alice-2")
        let back = try api.register(user: "alice", key: phone, code: code)
        #expect(back.status == 201)
        #expect(back.json?["status"]?.stringValue == "active")
    }

    @Test("a user left with pending devices but no active one cannot get another without a code")
    func pendingOnlyUserNeedsCode() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI { $0.enrollment = .open }
        let laptop = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: laptop)
        #expect(try api.register(user: "alice", key: try ServerTestKeys.key("alice-2")).status == 202)
        #expect(try api.authorized("DELETE", "/v1/devices/\(laptop.publicKey.fingerprint)", token: token).status == 204)
        let response = try api.register(user: "alice", key: try ServerTestKeys.key("alice-3"))
        #expect(response.status == 403)
        #expect(response.errorCode == "access_denied")
    }

    @Test("under open enrollment a new user's first device is active; a known user's needs approval")
    func openModeNewAndKnownUsers() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI { $0.enrollment = .open }
        let first = try api.register(user: "carol", key: try ServerTestKeys.key("carol-1"))
        #expect(first.status == 201)
        #expect(first.json?["status"]?.stringValue == "active")
        let second = try api.register(user: "carol", key: try ServerTestKeys.key("carol-2"))
        #expect(second.status == 202)
        #expect(second.json?["status"]?.stringValue == "pending")
    }

    @Test("the default configuration requires enrollment codes")
    func defaultIsCode() throws {
        #expect(ServerConfiguration(listen: try ListenAddress(parsing: "127.0.0.1:0")).enrollment == .code)
    }

    @Test("open enrollment warns on any address but loopback")
    func openEnrollmentWarning() throws {
        for (listen, mode, warns) in [
            ("0.0.0.0:8088", EnrollmentMode.open, true), ("192.0.2.7:8088", .open, true), ("[::]:8088", .open, true),
            ("[2001:db8::1]:8088", .open, true), ("127.0.0.1:8088", .open, false), ("127.4.5.6:8088", .open, false),
            ("[::1]:8088", .open, false), ("[::ffff:127.0.0.1]:8088", .open, false), ("localhost:8088", .open, false),
            ("0.0.0.0:8088", .code, false),
        ] {
            var configuration = ServerConfiguration(listen: try ListenAddress(parsing: listen))
            configuration.enrollment = mode
            #expect((configuration.openEnrollmentWarning != nil) == warns, "\(listen) \(mode)")
        }
        var exposed = ServerConfiguration(listen: try ListenAddress(parsing: "0.0.0.0:8088"))
        exposed.enrollment = .open
        #expect(exposed.openEnrollmentWarning?.contains("0.0.0.0:8088") == true)

        // The TLS deployment listens on loopback behind a proxy, for an https issuer: it warns.
        for (issuer, trustProxy, warns) in [
            ("https://auth.example.com", true, true), ("https://auth.example.com", false, true),
            (nil, true, true), ("http://localhost:8088", false, false), ("http://127.0.0.1:8088/", false, false),
            ("http://[::1]:8088", false, false),
        ] {
            var proxied = ServerConfiguration(listen: try ListenAddress(parsing: "127.0.0.1:8088"))
            proxied.enrollment = .open
            proxied.issuer = issuer
            proxied.trustProxy = trustProxy
            #expect((proxied.openEnrollmentWarning != nil) == warns, "\(issuer ?? "none") \(trustProxy)")
        }
        var behindProxy = ServerConfiguration(listen: try ListenAddress(parsing: "127.0.0.1:8088"))
        behindProxy.enrollment = .open
        behindProxy.trustProxy = true
        behindProxy.issuer = "https://auth.example.com"
        #expect(behindProxy.openEnrollmentWarning?.contains("--trust-proxy") == true)
        #expect(behindProxy.openEnrollmentWarning?.contains("https://auth.example.com") == true)
    }

    @Test(
        "open enrollment with the SSH CA never starts, on loopback neither; code enrollment with it does",
        .timeLimit(.minutes(10)))
    func openEnrollmentWithSSHCertificates() throws {
        let open = ["serve", "--enrollment", "open", "--ssh-ca-key-file", "/nonexistent/ssh-ca.pem"]
        // Local users reach a loopback listener too, and could register root there.
        for exposed in [
            ["--listen", "0.0.0.0:8088"], ["--trust-proxy", "--issuer", "https://auth.example.com"],
            ["--issuer", "https://auth.example.com"], ["--trust-proxy"], [], ["--issuer", "http://localhost:8088"],
            ["--listen", "[::1]:8088"],
        ] {
            let refused = #expect(throws: ServerConfigurationError.self, "\(exposed)") {
                try ServerCommand.parse(arguments: open + exposed, environment: [:], defaultSettingsFile: nil)
            }
            #expect(refused?.status == 64)
            #expect(refused?.message.contains("root included") == true, "\(refused?.message ?? "")")
            #expect(refused?.message.contains("--enrollment code") == true)
        }
        // Code enrollment may be exposed; open enrollment from the settings file is exit 78.
        let coded = ["serve", "--ssh-ca-key-file", "/nonexistent/ssh-ca.pem", "--listen", "0.0.0.0:8088"]
        #expect(throws: Never.self) {
            try ServerCommand.parse(arguments: coded, environment: [:], defaultSettingsFile: nil)
        }
        let directory = TemporaryDirectory("keyauth-open-ssh")
        defer { directory.remove() }
        try "enrollment = open\n".write(toFile: directory.path + "/server.conf", atomically: true, encoding: .utf8)
        let fromFile = #expect(throws: ServerConfigurationError.self) {
            try ServerCommand.parse(
                arguments: coded + ["--config", directory.path + "/server.conf"], environment: [:],
                defaultSettingsFile: nil)
        }
        #expect(fromFile?.status == 78)

        // The built server refuses to start, in one line.
        let started = try ExternalCommand.run(
            [Binaries.server] + open + ["--trust-proxy", "--db", directory.path + "/ka.db"], timeout: 30)
        #expect(started.status == 64)
        #expect(started.errorOutput.hasPrefix("keyauth-server: --enrollment open with --ssh-ca-key-file"))
        #expect(started.errorOutput.split(separator: "\n").count == 1, "\(started.errorOutput)")
    }

    @Test("issuing a code for an invalid user name is refused")
    func invalidUser() throws {
        let environment = TestEnvironment()
        let storage = try environment.openStorage()
        #expect(throws: ServerConfigurationError.self) { try EnrollmentCodes(storage: storage).issue(for: "no spaces") }
    }
}

/// Reads whole files without Foundation's URL ceremony.
enum FileManagerLite {
    static func contents(of path: String) -> [UInt8]? {
        guard let file = fopen(path, "rb") else { return nil }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = fread(&buffer, 1, buffer.count, file)
            if count <= 0 { break }
            bytes.append(contentsOf: buffer[..<count])
        }
        return bytes
    }
}

extension Array where Element == UInt8 {
    func containsSubsequence(_ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, count >= needle.count else { return false }
        for start in 0...(count - needle.count) where self[start] == needle[0] {
            if Array(self[start..<(start + needle.count)]) == needle { return true }
        }
        return false
    }
}
