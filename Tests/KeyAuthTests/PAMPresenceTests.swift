import Foundation
import KeyAuthTestSupport
import Testing

@testable import KeyAuth

#if canImport(Glibc)
    import Glibc
#endif

@Suite("Presence PAM check", .timeLimit(.minutes(10)))
struct PresencePAMTests {
    private let directory = ScratchDirectory("keyauth-presence")

    init() throws {
        try directory.write("permit", "auth required pam_permit.so\naccount required pam_permit.so\n")
        try directory.write("deny-auth", "auth required pam_deny.so\naccount required pam_permit.so\n")
        try directory.write("deny-account", "auth required pam_permit.so\naccount required pam_deny.so\n")
        // pam_exec asks the conversation for the password and pipes it, NUL-terminated, to grep.
        try directory.write(
            "password",
            """
            auth optional pam_echo.so Touch the key
            auth required pam_exec.so expose_authtok quiet /usr/bin/grep -qxzF correct-horse
            account required pam_permit.so

            """)
    }

    private func check(_ service: String, answers: [String] = []) -> (PAMPresence, FixedSecretReader) {
        let reader = FixedSecretReader(answers: answers)
        let presence = PAMPresence(
            serviceName: service, user: "root", configurationDirectory: directory.path, prompter: reader)
        return (presence, reader)
    }

    @Test("a stack that permits authentication and the account succeeds")
    func permit() async throws {
        let (presence, reader) = check("permit")
        #expect(presence.isAvailable())
        #expect(presence.kind == .pam)
        try await presence.verifyPresence(reason: "Sign in to example.com")
        #expect(reader.messages == ["Sign in to example.com"])
    }

    @Test("a stack that denies authentication fails with presenceDenied and PAM's text")
    func denyAuthentication() async throws {
        let (presence, _) = check("deny-auth")
        let error = await #expect(throws: KeyAuthError.self) { try await presence.verifyPresence(reason: "") }
        #expect(error?.code == .presenceDenied)
        let native = error?.underlying as? NativeError
        #expect(native?.library == "pam")
        #expect(native?.code != 0)
        #expect(native?.text.isEmpty == false)
        #expect(error?.message.contains("authentication") == true)
    }

    @Test("a stack that permits authentication but denies the account fails, so pam_acct_mgmt ran")
    func denyAccount() async throws {
        let (presence, _) = check("deny-account")
        let error = await #expect(throws: KeyAuthError.self) { try await presence.verifyPresence(reason: "") }
        #expect(error?.code == .presenceDenied)
        #expect(error?.message.contains("account") == true)
        #expect((error?.underlying as? NativeError)?.library == "pam")
    }

    @Test("the conversation answers a module's password prompt with echo off")
    func conversationThroughLibPAM() async throws {
        let (presence, reader) = check("password", answers: ["correct-horse"])
        try await presence.verifyPresence(reason: "")
        #expect(reader.requests.count == 1)
        #expect(reader.requests.first?.echo == false)
        #expect(reader.requests.first?.prompt.contains("assword") == true)
        #expect(reader.messages == ["Touch the key"])
    }

    @Test("a wrong answer to the module's prompt fails with presenceDenied")
    func wrongPassword() async throws {
        let (presence, _) = check("password", answers: ["battery-staple"])
        let error = await #expect(throws: KeyAuthError.self) { try await presence.verifyPresence(reason: "") }
        #expect(error?.code == .presenceDenied)
    }

    @Test("a prompter that cannot answer surfaces its own error, not PAM's")
    func prompterFailure() async throws {
        let (presence, _) = check("password", answers: [])
        let error = await #expect(throws: KeyAuthError.self) { try await presence.verifyPresence(reason: "") }
        #expect(error?.code == .cancelled)
    }

    @Test("an unknown service is unavailable")
    func unknownService() async throws {
        let (presence, reader) = check("no-such-service")
        #expect(!presence.isAvailable())
        let error = await #expect(throws: KeyAuthError.self) { try await presence.verifyPresence(reason: "why") }
        #expect(error?.code == .presenceUnavailable)
        #expect(error?.message.hasPrefix("the PAM service \"no-such-service\" is not configured: there is no ") == true)
        #expect(error?.message.hasSuffix("/no-such-service") == true, "\(error?.message ?? "")")
        #expect(reader.messages.isEmpty)
    }

    @Test("a service name that is a path is rejected")
    func pathServiceName() async throws {
        let (presence, _) = check("../permit")
        #expect(!presence.isAvailable())
        let error = await #expect(throws: KeyAuthError.self) { try await presence.verifyPresence(reason: "") }
        #expect(error?.code == .invalidArgument)
    }

    @Test("service names are looked up in lower case, as Linux-PAM does")
    func lowercaseService() async throws {
        let (presence, _) = check("PERMIT")
        #expect(presence.isAvailable())
        try await presence.verifyPresence(reason: "")
    }

    @Test("the default user is the effective user's login name")
    func defaultUser() {
        let presence = PAMPresence()
        let expected = getpwuid(geteuid()).flatMap { $0.pointee.pw_name }.map { String(cString: $0) }
        #expect(presence.user == expected)
        #expect(presence.serviceName == "keyauth")
        #expect(presence.configurationDirectory == nil)
    }

    @Test("the conversation function answers prompts with malloc'ed copies and shows messages")
    func conversationDirect() async throws {
        let reader = FixedSecretReader(answers: ["hunter2", "123456"])
        let result = runPAMConversation(
            [
                (.promptEchoOff, "Password: "), (.promptEchoOn, "Code: "), (.textInfo, "info"),
                (.errorMessage, "careful"),
            ],
            prompter: reader)
        #expect(result.status == 0)
        #expect(result.replies == ["hunter2", "123456", nil, nil])
        #expect(result.failure == nil)
        #expect(reader.requests == [.init(prompt: "Password: ", echo: false), .init(prompt: "Code: ", echo: true)])
        #expect(reader.messages == ["info", "careful"])
    }

    @Test("the conversation function returns no replies when the prompter fails")
    func conversationFailure() async throws {
        let reader = FixedSecretReader(answers: ["only one"])
        let result = runPAMConversation(
            [(.promptEchoOff, "Password: "), (.promptEchoOff, "Again: ")], prompter: reader)
        #expect(result.status != 0)
        #expect(result.replies.isEmpty)
        #expect(result.failure?.code == .cancelled)
    }

    @Test("the conversation function refuses an answer with a NUL byte")
    func conversationNUL() async throws {
        let reader = FixedSecretReader(answers: [SecretBytes([0x61, 0x00, 0x62])])
        let result = runPAMConversation([(.promptEchoOff, "Password: ")], prompter: reader)
        #expect(result.status != 0)
        #expect(result.failure?.code == .invalidArgument)
    }
}
