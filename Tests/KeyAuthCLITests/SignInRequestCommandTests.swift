import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthCLI

@Suite("keyauth requests, approve and deny: short IDs and JSON", .timeLimit(.minutes(5)))
struct SignInRequestCommandTests {
    @Test("requests --json lists the open requests, and approve and deny take an ID's first 8 characters")
    func prefixesAndJSON() async throws {
        try await withFirstDevice { laptop, _, server in
            let first = try server.startSignInRequest(for: "alice", application: "Mail")
            let second = try server.startSignInRequest(for: "alice", application: "Wiki")

            let listed = await laptop.run(["requests", "--json"])
            try #require(listed.status == 0, "\(listed.standardError)")
            let document = try JSONValue(parsing: listed.standardOutput)
            let entries = try #require(document["requests"]?.arrayValue)
            // Both started within a second: the list orders them by time, then by ID.
            #expect(Set(entries.compactMap { $0["id"]?.stringValue }) == [first, second])
            #expect(entries.count == 2)
            let mail = try #require(entries.first { $0["id"]?.stringValue == first })
            #expect(mail["client_name"] == .string("Mail"))
            #expect(mail["kind"] == .string("backchannel"))
            #expect(mail["requested_from"] == .string("192.0.2.10"))
            #expect(mail["created_at"]?.stringValue?.hasSuffix("Z") == true)
            #expect(mail["expires_at"]?.stringValue != nil)

            // --json is one document; a watch never ends.
            let watching = await laptop.run(["requests", "--json", "--watch"])
            #expect(watching.status == 64)
            expectOneErrorLine(watching)

            let denied = await laptop.run(["deny", String(first.prefix(8))])
            #expect(denied.status == 0, "\(denied.standardError)")
            #expect(denied.standardOutput.contains("Denied sign-in request \(first)."))

            // The refusal word at approve's prompt shows that the prefix found the request.
            let refused = await laptop.run(["approve", String(second.prefix(10))], standardInput: "deny\n")
            #expect(refused.status == 0, "\(refused.standardError)")
            #expect(refused.standardError.contains("Sign-in request \(second)"))
            #expect(refused.standardOutput.contains("Denied sign-in request \(second)."))

            let empty = await laptop.run(["requests", "--json"])
            #expect(try JSONValue(parsing: empty.standardOutput) == .object(["requests": .array([])]))

            // No open request starts so: "nothing matched", exit 1, as for an unknown whole ID.
            let none = await laptop.run(["deny", String(first.prefix(8))])
            #expect(none.status == 1)
            expectOneErrorLine(none)
            #expect(none.standardError.contains("no open sign-in request \(first.prefix(8)) for alice"))

            let short = await laptop.run(["approve", String(first.prefix(7))])
            #expect(short.status == 64)
            #expect(short.standardError.contains("give at least its first 8 characters"))
        }
    }

    @Test("approve on a device below the request's acr_values says why before the PIN and leaves the request open")
    func belowRequestedContext() async throws {
        try await withFirstDevice { laptop, _, server in
            let id = try server.startSignInRequest(
                for: "alice", application: "Payroll",
                form: "&binding_message=AB12&acr_values=urn%3Akeyauth%3Aacr%3Aattested")
            let refused = await laptop.run(["approve", String(id.prefix(8))], standardInput: "AB12\n")
            #expect(refused.status == 77, "\(refused.standardError)")
            // After the request's description, the server's reason is the one error line.
            #expect(refused.errorLines.last?.hasPrefix("keyauth: ") == true)
            #expect(refused.standardError.contains("this device's tier is software"))
            #expect(!refused.standardError.contains("last attempt"))
            let open = await laptop.run(["requests", "--json"])
            let requests = try JSONValue(parsing: open.standardOutput)["requests"]?.arrayValue
            #expect(requests?.compactMap { $0["id"]?.stringValue } == [id], "the request waits for another device")
        }
    }

    @Test("a prefix that starts several open requests is a usage error listing them")
    func ambiguousPrefix() throws {
        func request(_ id: String, _ name: String) -> SignInRequest {
            SignInRequest(
                id: id, kind: .backchannel, clientName: name, requestedFrom: nil, scope: nil,
                createdAt: "2026-12-01T10:00:00Z", expiresAt: "2026-12-01T10:05:00Z")
        }
        let requests = [
            request("abcdefgh" + String(repeating: "A", count: 35), "Mail"),
            request("abcdefgh" + String(repeating: "B", count: 35), "Wiki"),
        ]
        let ambiguous = #expect(throws: KeyAuthError.self) {
            try AnswerCommand.request("abcdefgh", in: requests, user: "alice", command: .approve)
        }
        #expect(ambiguous.map(ExitCode.init(for:)) == .usage)
        #expect(ambiguous?.message.contains("abcdefgh starts 2 open sign-in requests") == true)
        #expect(ambiguous?.message.contains("\(requests[0].id) (Mail)") == true)
        #expect(ambiguous?.message.contains("\(requests[1].id) (Wiki)") == true)
        #expect(
            try AnswerCommand.request("abcdefghB", in: requests, user: "alice", command: .deny).clientName == "Wiki")
        let none = #expect(throws: KeyAuthError.self) {
            try AnswerCommand.request("zzzzzzzz", in: requests, user: "alice", command: .deny)
        }
        #expect(none?.code == .signInRequestClosed)
        #expect(none.map(ExitCode.init(for:)) == .failure)
    }
}
