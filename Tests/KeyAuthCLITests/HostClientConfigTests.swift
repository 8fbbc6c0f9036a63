import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthCLI

#if canImport(Glibc)
    import Glibc
#endif

/// The host's push login settings: its `pam.conf` and the request's `mode=` and `hostconf=`.
@Suite("Push login settings: the host's pam.conf and the module's mode")
struct HostClientConfigTests {
    @Test("pam.conf as clients add prints it, with comments and spaces, gives the id and secret")
    func parses() throws {
        let config = try HostClientConfig(
            text: "# web1\nclient_id=abc\n\n  client_secret = s3cret  \n", path: "/etc/keyauth/pam.conf")
        #expect(config == HostClientConfig(clientID: "abc", clientSecret: "s3cret"))
    }

    @Test(
        "a malformed pam.conf is refused by line number, without the secret in the message",
        arguments: [
            "client_id=abc\n", "client_id=abc\nclient_secret=s3cret\nclient_secret=s3cret\n",
            "client_id=abc\nclient_secret=s3cret\nserver=x\n", "client_id=abc\nclient_secret s3cret\n",
            "client_id=\nclient_secret=s3cret\n",
        ])
    func malformed(text: String) {
        #expect {
            try HostClientConfig(text: text, path: "pam.conf")
        } throws: { error in
            guard let error = error as? KeyAuthError else { return false }
            return error.code == .invalidArgument && !error.message.contains("s3cret")
        }
    }

    @Test("no file means no push login; a file anyone else may read, or a link, is refused")
    func permissions() throws {
        let directory = TemporaryDirectory("keyauth-pamconf")
        defer { directory.remove() }
        let path = directory.path + "/pam.conf"
        #expect(try HostClientConfig.load(path: path) == nil)
        try Data("client_id=abc\nclient_secret=s3cret\n".utf8).write(to: URL(fileURLWithPath: path))
        chmod(path, 0o644)
        if geteuid() == 0 {
            #expect(throws: KeyAuthError.self) { try HostClientConfig.load(path: path) }
            chmod(path, 0o600)
            #expect(try HostClientConfig.load(path: path)?.clientID == "abc")
        }
        let link = directory.path + "/link.conf"
        symlink(path, link)
        #expect {
            try HostClientConfig.load(path: link)
        } throws: { error in
            (error as? KeyAuthError)?.code == .keyUnprotected
        }
    }

    @Test("the mapping file is read only as a regular file of root's: a link, a FIFO or a looser file is refused")
    func mappingFileChecks() throws {
        let directory = TemporaryDirectory("keyauth-pam-users")
        defer { directory.remove() }
        let path = directory.path + "/pam-users"
        #expect(try HostUserMapping.entry(for: "alice", file: path).keyauthUser == "alice")
        try Data("alice alice.smith\n".utf8).write(to: URL(fileURLWithPath: path))
        chmod(path, 0o644)
        func refused(_ file: String) -> Bool {
            do {
                _ = try HostUserMapping.entry(for: "alice", file: file)
                return false
            } catch {
                return error.code == .keyUnprotected
            }
        }
        if geteuid() == 0 {
            #expect(try HostUserMapping.entry(for: "alice", file: path).keyauthUser == "alice.smith")
            chmod(path, 0o664)
            #expect(refused(path))
            chmod(path, 0o644)
        }
        // The path is checked as opened: a link to a good file is refused, not followed.
        let link = directory.path + "/link"
        symlink(path, link)
        #expect(refused(link))
        let fifo = directory.path + "/fifo"
        #expect(mkfifo(fifo, 0o644) == 0)
        #expect(refused(fifo))
    }

    @Test("files saved with Windows line ends are read line by line, not as one commented-out line")
    func windowsLineEnds() throws {
        let mapping = "# who logs in as whom\r\nbob bob.jones\r\nalice alice.smith work\r\n"
        #expect(try HostUserMapping.entry(for: "bob", text: mapping, file: "f").keyauthUser == "bob.jones")
        #expect(
            try HostUserMapping.entry(for: "alice", text: mapping, file: "f")
                == .init(keyauthUser: "alice.smith", account: "work"))
        #expect(try HostUserMapping.entry(for: "carol", text: mapping, file: "f").keyauthUser == "carol")
        let config = try HostClientConfig(
            text: "# host client\r\nclient_id = web1\r\nclient_secret = s3cret\r\n", path: "c")
        #expect(config.clientID == "web1" && config.clientSecret == "s3cret")
    }

    @Test("the request carries mode= and hostconf=; auto is the default and an unknown mode is refused")
    func requestMode() throws {
        let base = "keyauth-pam 1\nuser alice\nservice sshd\nserver https://k.example\n"
        #expect(try PAMHelperRequest(text: base + "\n").mode == .auto)
        let push = try PAMHelperRequest(text: base + "mode push\nhostconf /etc/x.conf\n\n")
        #expect(push.mode == .push && push.hostConfig == "/etc/x.conf")
        #expect(try PAMHelperRequest(text: base + "mode local\n\n").mode == .local)
        #expect(throws: KeyAuthError.self) { try PAMHelperRequest(text: base + "mode always\n\n") }
    }

    @Test("the wait line names the host, the Linux user and the code after the seconds")
    func waitLine() {
        #expect(
            PushLogin.waitLine(seconds: 300, host: "web1", user: "alice", code: "42")
                == "wait 300 keyauth: to log in to web1 as alice, approve on your device (keyauth approve) "
                + "and type the code 42")
    }
}
