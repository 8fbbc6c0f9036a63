import Glibc
import KeyAuth
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
        #expect(Base64URL.decode(aliceCode)?.count == 16)

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
                hash: Crypto.sha256(Array(code.utf8)), user: "alice", now: environment.clock.now))
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
