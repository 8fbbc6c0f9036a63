import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Offline grants end to end: the real server issues them at host logins through the built
/// `pam_keyauth.so` and `pamtester`, the helper stores them in /var/lib/keyauth-pam, and logins
/// with the server down use them. The server signs with a key file the test holds, so that it
/// can also make grants the server would sign but for another host, another user or a past time.
@Suite(
    "Host login offline by grant", .serialized,
    .enabled(
        if: ExternalTools.shouldRun(installed: HostLoginMachine.canRun),
        "needs root, useradd and pamtester (apt-get install pamtester)"))
struct OfflineHostLoginTests {
    static let unavailable = "Authentication service cannot retrieve authentication info"

    /// Runs `body` on a host-login machine whose server signs with `key`, a key file of the test's.
    private func withOfflineMachine(
        tpm: SoftwareTPM? = nil, _ body: (HostLoginMachine, JWSPrivateKey) async throws -> Void
    ) async throws {
        let keys = TemporaryDirectory("keyauth-offline-key")
        defer { keys.remove() }
        let key = try JWSPrivateKey.generate(for: .es256)
        let path = keys.path + "/signing.pem"
        try SecureFile.write(try key.pkcs8PEM(), to: path)
        try await withHostLogin(tpm: tpm, serverArguments: ["--signing-key-file", path]) { machine in
            try await body(machine, key)
        }
    }

    /// Logs in online and returns the stored file's record, checking its permissions.
    private func loginOnline(_ machine: HostLoginMachine) throws -> [String: JSONValue] {
        let online = try machine.pamtester(pin: HostLoginMachine.pin)
        #expect(online.status == 0, "\(online.standardError) \(machine.syslog.text)")
        var status = stat()
        #expect(stat(machine.grantPath, &status) == 0)
        #expect(status.st_uid == 0 && status.st_mode & 0o777 == 0o600, "mode \(String(status.st_mode, radix: 8))")
        #expect(stat("/var/lib/keyauth-pam", &status) == 0 && status.st_uid == 0 && status.st_mode & 0o777 == 0o700)
        let bytes = try Array(Data(contentsOf: URL(fileURLWithPath: machine.grantPath)))
        let record = try JSONValue(parsing: bytes)
        return try #require(record.objectValue)
    }

    /// Replaces the stored grant with `grant`, keeping the file (root's, 0600).
    private func storeGrant(_ grant: String, record: [String: JSONValue], machine: HostLoginMachine) throws {
        var changed = record
        changed["grant"] = .string(grant)
        try Data(JSONValue.object(changed).serializedBytes()).write(to: URL(fileURLWithPath: machine.grantPath))
        chmod(machine.grantPath, 0o600)
    }

    /// The stored grant signed again by `key` with `changes` to its claims: what the server would
    /// have signed for another host, user or time.
    private func resigned(_ record: [String: JSONValue], key: JWSPrivateKey, _ changes: [String: JSONValue]) throws
        -> String
    {
        let grant = try #require(record["grant"]?.stringValue)
        let jws = try CompactJWS(parsing: grant, algorithms: [.es256])
        var claims = JWTClaims()
        for (name, value) in try jws.claims() { claims[name] = value }
        for (name, value) in changes { claims[name] = value }
        return try JWTBuilder(key: key).sign(claims: claims, type: OfflineGrantFormat.type, keyID: key.keyID)
    }

    @Test(
        "with the server down a valid grant logs in with the right PIN only, and the PIN is written nowhere",
        .timeLimit(.minutes(5)))
    func serverDownWithGrant() async throws {
        try await withOfflineMachine { machine, _ in
            let record = try loginOnline(machine)
            #expect(record["server"] == .string(machine.server.url))
            _ = machine.server.terminate()
            let offline = try machine.pamtester(pin: HostLoginMachine.pin)
            #expect(offline.status == 0, "\(offline.standardError) \(machine.syslog.text)")
            let wrong = try machine.pamtester(pin: "000000")
            #expect(wrong.status != 0)
            #expect(wrong.standardError.contains("Authentication failure"), "\(wrong.standardError)")
            let log = machine.syslog.text
            if machine.syslog.isCapturing {
                #expect(log.contains("offline grant until"), "\(log)")
                #expect(log.contains("logged in with the keyauth device key offline:"), "\(log)")
                #expect(log.contains("offline login: wrong_pin"), "\(log)")
            }
            let grantFile = String(
                decoding: (try? Data(contentsOf: URL(fileURLWithPath: machine.grantPath))) ?? Data(), as: UTF8.self)
            for (what, text) in [
                ("syslog", log), ("pamtester output", offline.standardOutput + offline.standardError),
                ("files", machine.filesText()), ("grant file", grantFile),
            ] {
                #expect(!text.contains(HostLoginMachine.pin), "the PIN is in the \(what)")
                #expect(!text.contains("000000"), "the wrong PIN is in the \(what)")
            }
        }
    }

    @Test(
        "a server that takes connections and never answers fails over to the grant within the module's timeout",
        .timeLimit(.minutes(5)))
    func hungServerFailsOverInTime() async throws {
        try await withOfflineMachine { machine, _ in
            _ = try loginOnline(machine)
            // 10 s for the answer after the PIN: each request gets (10 - 1) / 3 s. A helper that
            // gave the hung server the client's default of 10 s would leave nothing for the key's
            // scrypt and signature, and the module would answer "cannot retrieve authentication
            // info". (5 s showed the same, but left a loaded machine little for the scrypt.)
            try machine.writeService(server: machine.server.url, timeout: 10)
            // Stopped, its socket still completes connections (the kernel's backlog) and reads
            // nothing: the slowest server there is.
            let serverProcess = machine.server.processID
            try #require(kill(serverProcess, SIGSTOP) == 0)
            defer { kill(serverProcess, SIGCONT) }
            let hung = try machine.pamtester(pin: HostLoginMachine.pin)
            #expect(hung.status == 0, "\(hung.standardError) \(machine.syslog.text)")
            if machine.syslog.isCapturing {
                let log = machine.syslog.text
                #expect(log.contains("logged in with the keyauth device key offline:"), "\(log)")
            }
            let wrong = try machine.pamtester(pin: "000000")
            #expect(wrong.status != 0)
            #expect(wrong.standardError.contains("Authentication failure"), "\(wrong.standardError)")
        }
    }

    @Test(
        "with the server down a TPM-held key logs in by grant with its PIN, checked by the TPM",
        .timeLimit(.minutes(5)))
    func serverDownWithTPMKey() async throws {
        let tpm = try SoftwareTPM()
        defer { withExtendedLifetime(tpm) {} }
        try await withOfflineMachine(tpm: tpm) { machine, _ in
            _ = try loginOnline(machine)
            _ = machine.server.terminate()
            let offline = try machine.pamtester(pin: HostLoginMachine.pin)
            #expect(offline.status == 0, "\(offline.standardError) \(machine.syslog.text)")
            let wrong = try machine.pamtester(pin: "000000")
            #expect(wrong.status != 0)
            if machine.syslog.isCapturing {
                #expect(machine.syslog.text.contains("offline login: wrong_pin"), "\(machine.syslog.text)")
            }
        }
    }

    @Test(
        "with the server down and no grant, or offline=no, the login is unavailable as before",
        .timeLimit(.minutes(5)))
    func serverDownWithoutGrant() async throws {
        try await withOfflineMachine { machine, _ in
            try machine.writeService(server: machine.server.url, extra: " offline=no")
            let online = try machine.pamtester(pin: HostLoginMachine.pin)
            #expect(online.status == 0, "\(online.standardError)")
            #expect(!FileManager.default.fileExists(atPath: machine.grantPath), "offline=no stored a grant")
            _ = machine.server.terminate()
            let off = try machine.pamtester(pin: HostLoginMachine.pin)
            #expect(off.status != 0)
            #expect(off.standardError.contains(Self.unavailable), "\(off.standardError)")
            try machine.writeService(server: machine.server.url)
            let none = try machine.pamtester(pin: HostLoginMachine.pin)
            #expect(none.status != 0)
            #expect(none.standardError.contains(Self.unavailable), "\(none.standardError)")
            if machine.syslog.isCapturing {
                let log = machine.syslog.text
                #expect(log.contains("offline login is off (offline=no)"), "\(log)")
                #expect(log.contains("no offline grant for \(machine.user)"), "\(log)")
            }
        }
    }

    @Test(
        "under offline=no a grant that another service's login stored neither logs in nor is renewed",
        .timeLimit(.minutes(5)))
    func grantUnderOfflineOff() async throws {
        try await withOfflineMachine { machine, _ in
            _ = try loginOnline(machine)
            let stored = try Data(contentsOf: URL(fileURLWithPath: machine.grantPath))
            try machine.writeService(server: machine.server.url, extra: " offline=no")
            let online = try machine.pamtester(pin: HostLoginMachine.pin)
            #expect(online.status == 0, "\(online.standardError)")
            // Each grant has a jti of its own: a renewal would have changed the file.
            #expect(try Data(contentsOf: URL(fileURLWithPath: machine.grantPath)) == stored, "renewed")
            _ = machine.server.terminate()
            let off = try machine.pamtester(pin: HostLoginMachine.pin)
            #expect(off.status != 0)
            #expect(off.standardError.contains(Self.unavailable), "\(off.standardError)")
            #expect(
                try Data(contentsOf: URL(fileURLWithPath: machine.grantPath)) == stored, "a server down ends nothing")
            if machine.syslog.isCapturing {
                #expect(machine.syslog.text.contains("offline login is off (offline=no)"), "\(machine.syslog.text)")
            }
        }
    }

    @Test(
        "an expired, tampered, other host's or other user's grant is refused offline",
        .timeLimit(.minutes(5)))
    func badGrants() async throws {
        try await withOfflineMachine { machine, key in
            let record = try loginOnline(machine)
            _ = machine.server.terminate()
            let now = Int64(Date().timeIntervalSince1970)
            let original = try #require(record["grant"]?.stringValue)
            let parts = original.split(separator: ".").map(String.init)
            let decoded = try JSONValue(parsing: Base64URL.decode(parts[1]) ?? [])
            var payload = try #require(decoded.objectValue)
            payload["exp"] = .integer(now + 30 * 86_400)
            let tampered =
                parts[0] + "." + Base64URL.encode(JSONValue.object(payload).serializedBytes()) + "." + parts[2]
            let cases: [(String, String, String)] = [
                (
                    "expired",
                    try resigned(record, key: key, ["iat": .integer(now - 7200), "exp": .integer(now - 3600)]),
                    "the grant expired"
                ),
                ("tampered", tampered, "the grant's signature does not verify"),
                (
                    "other host", try resigned(record, key: key, ["host": .string("elsewhere.example")]),
                    "the grant is for host elsewhere.example"
                ),
                (
                    "other user",
                    try resigned(record, key: key, ["linux_user": .string("root"), "sub": .string("root")]),
                    "the grant is for another user"
                ),
            ]
            for (what, grant, reason) in cases {
                try storeGrant(grant, record: record, machine: machine)
                let result = try machine.pamtester(pin: HostLoginMachine.pin)
                #expect(result.status != 0, "the \(what) grant logged in")
                if machine.syslog.isCapturing {
                    #expect(machine.syslog.text.contains(reason), "\(what): \(machine.syslog.text)")
                }
            }
            // The original grant still works, so the refusals above were the grants' own.
            try storeGrant(original, record: record, machine: machine)
            let valid = try machine.pamtester(pin: HostLoginMachine.pin)
            #expect(valid.status == 0, "\(valid.standardError) \(machine.syslog.text)")
        }
    }

    /// How the refusal of a revoked device reaches the host: through the service that stored
    /// the grant, through one with `offline=no` (sshd's, say), or through one with `offline=no`
    /// called by a setuid program whose real uid is the user's (`su`).
    enum Refusal: CaseIterable, Sendable {
        case sameService, offlineOff, offlineOffFromUser
    }

    @Test(
        "a revoked device is refused online, its grant is emptied, and it no longer logs in offline",
        .timeLimit(.minutes(5)), arguments: Refusal.allCases)
    func revokedDevice(refusal: Refusal) async throws {
        let refusedWithOfflineOff = refusal != .sameService
        try await withOfflineMachine { machine, _ in
            _ = try loginOnline(machine)
            let revoked = try KeyAuthServerProcess.runCommand([
                "revoke", machine.keyID, "--db", machine.scratch.path + "/server.db",
            ])
            try #require(revoked.status == 0, "\(revoked.error)")
            if refusedWithOfflineOff { try machine.writeService(server: machine.server.url, extra: " offline=no") }
            let refused =
                refusal == .offlineOffFromUser
                ? try machine.pamtesterFromUser(pin: HostLoginMachine.pin)
                : try machine.pamtester(pin: HostLoginMachine.pin)
            #expect(refused.status != 0)
            var status = stat()
            #expect(stat(machine.grantPath, &status) == 0 && status.st_size == 0, "the grant was not emptied")
            if refusedWithOfflineOff { try machine.writeService(server: machine.server.url) }
            _ = machine.server.terminate()
            let offline = try machine.pamtester(pin: HostLoginMachine.pin)
            #expect(offline.status != 0)
            if machine.syslog.isCapturing {
                #expect(machine.syslog.text.contains("invalid_grant"), "\(machine.syslog.text)")
            }
        }
    }
}
