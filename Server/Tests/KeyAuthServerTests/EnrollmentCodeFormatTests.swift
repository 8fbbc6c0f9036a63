import KeyAuth
import Testing

@testable import KeyAuthServer

/// Enrollment codes that can be read out: Crockford base32, grouped, forgiving when typed.
@Suite("Enrollment code format")
struct EnrollmentCodeFormatTests {
    @Test("an issued code is 20 characters of Crockford base32 in five groups of four")
    func issuedForm() throws {
        let environment = TestEnvironment()
        let storage = try environment.openStorage()
        defer { storage.close() }
        let code = try EnrollmentCodes(storage: storage, now: environment.clock.closure).issue(for: "alice")
        #expect(code.wholeMatch(of: /[0-9A-HJKMNP-TV-Z]{4}(-[0-9A-HJKMNP-TV-Z]{4}){4}/) != nil, "\(code)")
    }

    @Test(
        "a code is accepted in any case, with or without dashes or spaces, O for 0 and I or L for 1",
        arguments: [
            ("7K3M-9QX0-ABCD-EFGH-JK1M", "7K3M-9QX0-ABCD-EFGH-JK1M"),
            ("7k3m9qx0abcdefghjk1m", "7K3M-9QX0-ABCD-EFGH-JK1M"),
            ("7K3M 9QXO ABCD EFGH JKLM", "7K3M-9QX0-ABCD-EFGH-JK1M"),
            ("7k3m-9qxo-abcd-efgh-jkim", "7K3M-9QX0-ABCD-EFGH-JK1M"),
        ])
    func canonical(_ typed: String, _ expected: String) {
        #expect(EnrollmentCodes.canonical(typed) == expected)
    }

    @Test(
        "anything else is not a code of this form",
        arguments: ["", "7K3M-9QX0", "7K3M-9QX0-ABCD-EFGH-JK1U", "AAAAAAAAAAAAAAAAAAAAAA"])
    func notCanonical(_ typed: String) {
        #expect(EnrollmentCodes.canonical(typed) == nil)
    }

    @Test("a code typed in lower case without dashes registers; a code of the earlier form still does")
    func typedForms() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI { $0.enrollment = .code }
        let codes = EnrollmentCodes(storage: api.storage, now: environment.clock.closure)
        let code = try codes.issue(for: "alice")
        let typed = code.lowercased().replacing("-", with: "")
        #expect(try api.register(user: "alice", key: try ServerTestKeys.key("alice-1"), code: typed).status == 201)
        #expect(try api.register(user: "alice", key: try ServerTestKeys.key("alice-2"), code: code).status == 403)

        // Stored before this form: the hash of 22 base64url characters, matched as typed only.
        let old = "Ab-d_fGhIjKlMnOpQrStUv"
        try api.storage.insertEnrollmentCode(
            hash: try EnrollmentCodes.hash(old), user: "bob", expiresAt: environment.clock.now + 900)
        let bob = try ServerTestKeys.key("bob-1")
        #expect(try api.register(user: "bob", key: bob, code: old.lowercased()).status == 403)
        #expect(try api.register(user: "bob", key: bob, code: old).status == 201)
    }
}
