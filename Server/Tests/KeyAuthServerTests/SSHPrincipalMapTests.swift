import Foundation
import Glibc
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// `--ssh-principals-file`: the rules, their errors with line numbers, the file's guard, and the
/// certificates a server issues with it, read again at cleanup.
@Suite("SSH principal mappings", .timeLimit(.minutes(10)))
struct SSHPrincipalMapTests {
    @Test("a user gets their name, their own principals, then their groups', each once")
    func principals() throws {
        let map = try SSHPrincipalMap(
            parsing: """
                # who logs in where
                user alice: deploy, backup   # two
                group ops: monitoring deploy
                group db: postgres
                members db: alice
                members ops: alice bob
                user alice: alice extra

                """)
        #expect(map.principals(for: "alice") == ["alice", "deploy", "backup", "extra", "postgres", "monitoring"])
        #expect(map.principals(for: "bob") == ["bob", "monitoring", "deploy"])
        #expect(map.principals(for: "carol") == ["carol"])
        #expect(SSHPrincipalMap().principals(for: "dave") == ["dave"])
    }

    @Test("a user named like a role the file grants to others does not get it, unless granted it too")
    func nameOfARole() throws {
        let map = try SSHPrincipalMap(
            parsing: "group deployers: deploy\nmembers deployers: alice\nuser deploy: tools\nuser backup: backup\n")
        #expect(map.principals(for: "alice") == ["alice", "deploy"])
        #expect(map.principals(for: "deploy") == ["tools"])
        #expect(map.principals(for: "backup") == ["backup"])
        let bare = try SSHPrincipalMap(parsing: "group deployers: deploy\nmembers deployers: alice\n")
        #expect(bare.principals(for: "deploy").isEmpty)
        #expect(bare.granted(to: "deploy").isEmpty)
        #expect(map.granted(to: "deploy") == ["tools"])
        #expect(map.granted(to: "alice") == ["alice", "deploy"])
    }

    @Test("a certificate's principals stop at 16 KiB, so that its line stays one the client reads")
    func principalBytesAreBounded() throws {
        let many = (0..<200).map { "p\($0)-" + String(repeating: "x", count: 240) }
        let map = try SSHPrincipalMap(parsing: "user alice: " + many.joined(separator: " ") + "\n")
        let principals = map.principals(for: "alice")
        #expect(principals.first == "alice")
        #expect(principals.map(\.utf8.count).reduce(0, +) <= SSHPrincipalMap.maximumPrincipalBytes)
        #expect(principals.count > 60 && principals.count < 201)
        // What the caps leave out is still granted: a certificate naming it is not outgrown.
        #expect(map.granted(to: "alice") == Set(["alice"] + many))
    }

    @Test("a file with CRLF line endings reads as the same lines")
    func crlfLineEndings() throws {
        let map = try SSHPrincipalMap(
            parsing: "# who logs in where\r\nuser alice: deploy\r\ngroup ops: wheel\r\nmembers ops: alice\r\n")
        #expect(map.principals(for: "alice") == ["alice", "deploy", "wheel"])
    }

    @Test("a comment whose \"#\" carries a combining mark or a joiner is still a comment")
    func commentsCutByScalar() throws {
        for mark in ["\u{301}", "\u{FE0F}", "\u{200D}"] {
            let map = try SSHPrincipalMap(parsing: "group admins: root\nmembers admins: alice #\(mark) bob\n")
            #expect(map.principals(for: "bob") == ["bob"], "\(mark.unicodeScalars.first?.value ?? 0)")
            #expect(map.principals(for: "alice") == ["alice", "root"])
        }
    }

    @Test(
        "a bad rule is refused with its line number",
        arguments: [
            ("user alice deploy", 1, "expected user NAME"),
            ("\nuser: deploy", 2, "a rule, a name"),
            ("user alice:", 1, "a rule, a name"),
            ("role alice: x", 1, "unknown rule role"),
            ("user alice: a*", 1, "a principal is printable ASCII"),
            ("user alice: caf\u{E9}", 1, "a principal is printable ASCII"),
            ("user alice: " + String(repeating: "p", count: 257), 1, "at most 256"),
            ("group ops: x\nmembers opz: alice", 2, "group opz has members but no principals"),
            // "#" and a combining mark are one Character: the comment is still a comment, and
            // what is left names no user but "alice", here refused as a list of one bad name.
            ("group ops: x\nmembers ops: alice,\u{301}bob", 2, "alice,\u{301}bob is not a user name"),
            ("user -alice: deploy", 1, "-alice is not a user name"),
        ])
    func refusals(text: String, line: Int, message: String) {
        let error = #expect(throws: KeyAuthError.self) { try SSHPrincipalMap(parsing: text) }
        #expect(error?.code == .invalidArgument)
        #expect(error?.message.hasPrefix("line \(line): ") == true, "\(error?.message ?? "")")
        #expect(error?.message.contains(message) == true, "\(error?.message ?? "")")
    }

    @Test("the file is refused when others may write it, and a server starts only with a CA")
    func fileGuard() throws {
        let environment = TestEnvironment()
        let path = environment.directory.path + "/principals"
        try "user alice: deploy\n".write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o644)
        #expect(try SSHPrincipalMap.load(file: path).principals(for: "alice") == ["alice", "deploy"])
        chmod(path, 0o664)
        let writable = #expect(throws: KeyAuthError.self) { try SSHPrincipalMap.load(file: path) }
        #expect(writable?.code == .keyUnprotected)
        #expect(writable?.message.contains("--ssh-principals-file") == true)
        let missing = #expect(throws: KeyAuthError.self) { try SSHPrincipalMap.load(file: path + ".none") }
        #expect(missing?.code == .keyNotFound)
        chmod(path, 0o644)
        let withoutCA = #expect(throws: KeyAuthError.self) {
            _ = try environment.makeResponder { $0.sshPrincipalsFile = path }
        }
        #expect(withoutCA?.message.contains("needs --ssh-ca-key-file") == true)
    }

    @Test("certificates carry the mapped principals, and an edit takes effect at the next cleanup")
    func issuedAndReloaded() throws {
        let environment = TestEnvironment(clockStart: ServerClock.now())
        let (responder, api, path, _) = try SSHPrincipalRevocationTests.authority(
            environment, rules: "user alice: deploy\n")
        let storage = api.storage
        let token = try api.activeDevice(user: "alice", key: try ServerTestKeys.key("alice-1"))
        let first = try api.authorized("POST", "/v1/ssh/certificates", token: token)
        #expect(first.json?["principals"] == .array(["alice", "deploy"]))
        let audited = try storage.auditEvents(since: 0).filter { $0.action == .issueSSHCertificate }
        #expect(audited.last?.detail?.contains("principals alice,deploy") == true)

        try "group ops: monitoring\nmembers ops: alice\n".write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o600)
        #expect(
            try api.authorized("POST", "/v1/ssh/certificates", token: token).json?["principals"]
                == .array(["alice", "deploy"]))
        responder.purgeExpired()
        #expect(
            try api.authorized("POST", "/v1/ssh/certificates", token: token).json?["principals"]
                == .array(["alice", "monitoring"]))

        // A user whose name is a role the file gives others, and who has nothing else, gets no
        // certificate: one without principals is valid for every account.
        try "group deployers: deploy\nmembers deployers: alice\n".write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o600)
        responder.purgeExpired()
        let deployToken = try api.activeDevice(user: "deploy", key: try ServerTestKeys.key("deploy-1"))
        let refused = try api.authorized("POST", "/v1/ssh/certificates", token: deployToken)
        #expect(refused.status == 403 && refused.errorCode == "access_denied", "\(refused.text)")
        #expect(
            try api.authorized("POST", "/v1/ssh/certificates", token: token).json?["principals"]
                == .array(["alice", "deploy"]))
        try "group ops: monitoring\nmembers ops: alice\n".write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o600)
        responder.purgeExpired()

        // A broken edit leaves the rules read before in use.
        try "frobnicate\n".write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o600)
        responder.purgeExpired()
        #expect(
            try api.authorized("POST", "/v1/ssh/certificates", token: token).json?["principals"]
                == .array(["alice", "monitoring"]))
    }
}
