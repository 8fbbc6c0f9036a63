import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

/// A made-up key ID: a fingerprint's shape (43 base64url characters of 32 bytes), as the client
/// requires of every `kid` it reads.
private func kid(_ index: Int) -> String {
    Base64URL.encode([UInt8](repeating: UInt8(index), count: 32))
}

/// A device entry as the server writes it, with a made-up kid.
private func entry(_ index: Int, registeredFrom: String = "\"192.0.2.7\"") -> String {
    "{\"kid\":\"\(kid(index))\",\"name\":\"device \(index)\",\"status\":\"active\","
        + "\"created_at\":\"2025-01-0\(index % 9 + 1)T00:00:00Z\",\"last_login_at\":null,"
        + "\"registered_from\":\(registeredFrom)}"
}

private let token = AccessToken(value: "tok.en.x", expiresAt: Date().addingTimeInterval(600))

@Suite("Device list pages, device entries and approval", .timeLimit(.minutes(10)))
struct DeviceListTests {
    @Test("the list follows next_cursor over three pages, in order, with the token on every request")
    func threePages() async throws {
        let responder = try LoopbackHTTPResponder { request in
            guard request.headers["authorization"] == "Bearer tok.en.x" else {
                return .oauthError(401, "invalid_token", "no")
            }
            switch request.path {
            case "/v1/devices?limit=100":
                return .json(200, "{\"devices\":[\(entry(1)),\(entry(2))],\"next_cursor\":\"page 2/+\"}")
            case "/v1/devices?limit=100&cursor=page%202%2F%2B":
                return .json(200, "{\"devices\":[\(entry(3)),\(entry(4))],\"next_cursor\":\"3\"}")
            case "/v1/devices?limit=100&cursor=3":
                return .json(200, "{\"devices\":[\(entry(5, registeredFrom: "null"))],\"next_cursor\":null}")
            default:
                return .oauthError(404, "not_found", request.path)
            }
        }
        defer { responder.stop() }
        let list = try await KeyAuthClient(serverURL: responder.url).listDevices(accessToken: token)
        #expect(list.devices.map(\.keyID) == (1...5).map(kid))
        #expect(!list.isTruncated)
        #expect(list.devices.first?.registeredFrom == "192.0.2.7")
        #expect(list.devices.last?.registeredFrom == nil)
        #expect(list.devices.first?.name == "device 1")
        #expect(responder.requests.count == 3)
    }

    @Test("a server that never stops sending next_cursor is read for ten pages, and the list says it is truncated")
    func truncatedAtTheBound() async throws {
        let pages = OutputCollector()
        let responder = try LoopbackHTTPResponder { _ in
            pages.append("x")
            let page = pages.text.count
            return .json(200, "{\"devices\":[\(entry(page))],\"next_cursor\":\"after-\(page)\"}")
        }
        defer { responder.stop() }
        let list = try await KeyAuthClient(serverURL: responder.url).listDevices(accessToken: token)
        #expect(KeyAuthClient.maximumDevicePages == 10)
        #expect(responder.requests.count == 10)
        #expect(list.devices.count == 10)
        #expect(list.isTruncated)
        #expect(responder.requests.last?.path == "/v1/devices?limit=100&cursor=after-9")
    }

    @Test(
        "a next_cursor that is not a non-empty string is refused cleanly",
        arguments: ["7", "true", "{}", "[\"a\"]", "\"\"", "\"\(String(repeating: "c", count: 1025))\""])
    func malformedCursor(cursor: String) async throws {
        let responder = try LoopbackHTTPResponder { _ in
            .json(200, "{\"devices\":[\(entry(1))],\"next_cursor\":\(cursor)}")
        }
        defer { responder.stop() }
        let client = try KeyAuthClient(serverURL: responder.url)
        let error = await #expect(throws: KeyAuthError.self) { try await client.listDevices(accessToken: token) }
        #expect(error?.code == .serverRejected)
        #expect(error?.message.contains("invalid next_cursor") == true)
        #expect(responder.requests.count == 1)
    }

    @Test("a next_cursor the client already followed is refused instead of read again")
    func repeatedCursor() async throws {
        let responder = try LoopbackHTTPResponder { _ in
            .json(200, "{\"devices\":[\(entry(1))],\"next_cursor\":\"same\"}")
        }
        defer { responder.stop() }
        let client = try KeyAuthClient(serverURL: responder.url)
        let error = await #expect(throws: KeyAuthError.self) { try await client.listDevices(accessToken: token) }
        #expect(error?.message.contains("invalid next_cursor") == true)
        #expect(responder.requests.count == 2)
    }

    @Test("a registered_from that is neither a string nor null is refused")
    func malformedAddress() async throws {
        let responder = try LoopbackHTTPResponder { _ in
            .json(200, "{\"devices\":[\(entry(1, registeredFrom: "[1,2]"))]}")
        }
        defer { responder.stop() }
        let client = try KeyAuthClient(serverURL: responder.url)
        let error = await #expect(throws: KeyAuthError.self) { try await client.listDevices(accessToken: token) }
        #expect(error?.code == .serverRejected)
        #expect(error?.message.contains("registered_from") == true)
    }

    @Test("approval sends the assertion, returns the device the server approved, and refuses an answer about another")
    func approvalAnswer() async throws {
        let kid = TestKeys.second.publicKey.fingerprint
        let responder = try LoopbackHTTPResponder { request in
            let asked = request.path.split(separator: "/").dropFirst(2).first.map(String.init) ?? ""
            let answered = asked == kid ? kid : TestKeys.first.publicKey.fingerprint
            return .json(
                200,
                "{\"kid\":\"\(answered)\",\"user\":\"alice\",\"name\":\"new laptop\",\"status\":\"active\","
                    + "\"created_at\":\"2025-03-04T05:06:07Z\",\"registered_from\":\"203.0.113.9\"}")
        }
        defer { responder.stop() }
        let client = try KeyAuthClient(serverURL: responder.url)
        let device = try await client.approveDevice(keyID: kid, assertion: "a.b.c", accessToken: token)
        #expect(
            device
                == Device(
                    keyID: kid, name: "new laptop", status: .active, createdAt: "2025-03-04T05:06:07Z",
                    lastLoginAt: nil,
                    registeredFrom: "203.0.113.9"))
        #expect(responder.requests.first?.method == "POST")
        #expect(
            responder.requests.first.flatMap { try? JSONValue(parsing: $0.body) }?["assertion"]?.stringValue == "a.b.c")
        let other = String(repeating: "A", count: 43)
        let error = await #expect(throws: KeyAuthError.self) {
            try await client.approveDevice(keyID: other, assertion: "a.b.c", accessToken: token)
        }
        #expect(error?.code == .serverRejected)
    }
}
