import KeyAuth
import Testing

@testable import KeyAuthServer

@Suite("Pending devices: the cap, retention, the paged list and what approval shows")
struct PendingDeviceTests {
    /// `api` with requests from `address`, as a flood from many addresses would come.
    private func from(_ address: String, _ api: TestAPI) -> TestAPI {
        var api = api
        api.clientAddress = address
        return api
    }

    @Test("the 11th pending device gets 429 slow_down until the oldest expires; Retry-After says when")
    func capAndRetryAfter() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI { $0.failureLimit = 100_000 }
        _ = try api.activeDevice(user: "alice", key: try ServerTestKeys.key("alice-1"))
        let start = environment.clock.now
        for index in 0..<10 {
            environment.clock.advance(by: 1)
            let response = try from("198.51.100.\(index)", api).register(
                user: "alice", key: try ServerTestKeys.key("flood-\(index)"))
            #expect(response.status == 202)
        }
        environment.clock.advance(by: 10)
        let refused = try from("203.0.113.9", api).register(user: "alice", key: try ServerTestKeys.key("flood-10"))
        #expect(refused.status == 429)
        #expect(refused.errorCode == "slow_down")
        // The oldest pending device was registered at start + 1 and expires 600 s later.
        #expect(refused.headers["Retry-After"] == String(start + 1 + 600 - environment.clock.now))
        #expect(try api.storage.device(kid: try ServerTestKeys.key("flood-10").publicKey.fingerprint) == nil)

        // A retry of a device already pending is still answered idempotently at the cap.
        #expect(try api.register(user: "alice", key: try ServerTestKeys.key("flood-3")).status == 200)
        // Another user's cap is their own.
        _ = try api.activeDevice(user: "bob", key: try ServerTestKeys.key("bob-1"))
        #expect(try api.register(user: "bob", key: try ServerTestKeys.key("bob-2")).status == 202)

        environment.clock.advance(by: start + 601 - environment.clock.now - 1)
        #expect(try api.register(user: "alice", key: try ServerTestKeys.key("flood-10")).headers["Retry-After"] == "1")
        environment.clock.advance(by: 1)
        #expect(try api.register(user: "alice", key: try ServerTestKeys.key("flood-10")).status == 202)
        #expect(try api.register(user: "alice", key: try ServerTestKeys.key("flood-11")).status == 429)
    }

    @Test("approving or denying a pending device frees its place under the cap")
    func decisionsFreePlaces() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI { $0.failureLimit = 100_000 }
        let token = try api.activeDevice(user: "alice", key: try ServerTestKeys.key("alice-1"))
        for index in 0..<10 {
            #expect(try api.register(user: "alice", key: try ServerTestKeys.key("flood-\(index)")).status == 202)
        }
        #expect(try api.register(user: "alice", key: try ServerTestKeys.key("flood-10")).status == 429)
        let denied = try ServerTestKeys.key("flood-0").publicKey.fingerprint
        #expect(try api.authorized("DELETE", "/v1/devices/\(denied)", token: token).status == 204)
        #expect(try api.register(user: "alice", key: try ServerTestKeys.key("flood-10")).status == 202)
        let approved = try ServerTestKeys.key("flood-1").publicKey.fingerprint
        #expect(
            try api.approveDevice(approved, approver: try ServerTestKeys.key("alice-1"), token: token).status == 200)
        #expect(try api.register(user: "alice", key: try ServerTestKeys.key("flood-11")).status == 202)
        #expect(try api.register(user: "alice", key: try ServerTestKeys.key("flood-12")).status == 429)
    }

    @Test("the cleanup deletes pending devices 24 h after they expired and denied ones 24 h after denial")
    func retention() throws {
        let environment = TestEnvironment()
        let (responder, storage) = try environment.makeResponder()
        let api = TestAPI(
            transport: DirectTransport(responder: responder), issuer: TestEnvironment.issuer,
            clock: environment.clock, storage: storage)
        let laptop = try ServerTestKeys.key("alice-1")
        let old = try ServerTestKeys.key("alice-old")
        let phone = try ServerTestKeys.key("alice-2")
        let tablet = try ServerTestKeys.key("alice-3")
        var token = try api.activeDevice(user: "alice", key: laptop)
        #expect(try api.register(user: "alice", key: old).status == 202)
        #expect(
            try api.approveDevice(old.publicKey.fingerprint, approver: laptop, token: token).status == 200)
        #expect(try api.authorized("DELETE", "/v1/devices/\(old.publicKey.fingerprint)", token: token).status == 204)
        #expect(try api.register(user: "alice", key: phone).status == 202)
        #expect(try api.register(user: "alice", key: tablet).status == 202)
        #expect(try api.authorized("DELETE", "/v1/devices/\(tablet.publicKey.fingerprint)", token: token).status == 204)
        let start = environment.clock.now

        // Until 24 h after the denial, the denied device still learns it was denied.
        environment.clock.advance(by: 86_400)
        responder.purgeExpired()
        #expect(try api.login(tablet).errorCode == "access_denied")
        environment.clock.advance(by: 1)
        responder.purgeExpired()
        #expect(try storage.device(kid: tablet.publicKey.fingerprint) == nil)
        #expect(try api.login(tablet).errorDescription == DeviceAssertionVerifier.uniformFailure)

        // The pending device expired at start + 600; it goes 24 h later.
        environment.clock.advance(by: start + 600 + 86_400 - environment.clock.now)
        responder.purgeExpired()
        #expect(try api.login(phone).errorCode == "expired_token")
        environment.clock.advance(by: 1)
        responder.purgeExpired()
        #expect(try storage.device(kid: phone.publicKey.fingerprint) == nil)
        #expect(try api.login(phone).errorDescription == DeviceAssertionVerifier.uniformFailure)

        // Active and revoked devices stay for good.
        environment.clock.advance(by: 365 * 86_400)
        responder.purgeExpired()
        token = try api.accessToken(laptop)
        let list = try api.authorized("GET", "/v1/devices", token: token)
        let statuses = (list.json?["devices"]?.arrayValue ?? []).compactMap { $0["status"]?.stringValue }
        #expect(statuses.sorted() == ["active", "revoked"])
    }

    @Test("the device list pages with limit and cursor, in creation order, and refuses bad values with 400")
    func paging() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let token = try api.activeDevice(user: "alice", key: try ServerTestKeys.key("alice-1"))
        for index in 0..<249 {
            let kid = try Base64URL.encode(CryptoPrimitives.sha256(Array("paged-\(index)".utf8)))
            #expect(
                try api.storage.insertDevice(
                    DeviceRecord(
                        kid: kid, user: "alice", name: "device \(index)", publicKeyPEM: "-----BEGIN PUBLIC KEY-----\n",
                        status: .revoked, createdAt: environment.clock.now + Int64(index % 7))))
        }
        func page(_ query: [String: String]) throws -> HTTPResponse {
            try api.transport.send(
                HTTPRequest(
                    method: "GET", path: "/v1/devices", query: query, headers: ["Authorization": "Bearer \(token)"]))
        }
        let first = try page([:])
        #expect(first.json?["devices"]?.arrayValue?.count == 100)
        #expect(first.json?["next_cursor"]?.stringValue != nil)

        var kids: [String] = []
        var query = ["limit": "40"]
        var sizes: [Int] = []
        while true {
            let response = try page(query)
            #expect(response.status == 200)
            let devices = response.json?["devices"]?.arrayValue ?? []
            sizes.append(devices.count)
            kids += devices.compactMap { $0["kid"]?.stringValue }
            guard let cursor = response.json?["next_cursor"]?.stringValue else { break }
            query["cursor"] = cursor
        }
        #expect(sizes == [40, 40, 40, 40, 40, 40, 10])
        #expect(kids == (try api.storage.devices(user: "alice")).map(\.kid))
        #expect(try page(["limit": "100"]).json?["next_cursor"] != nil)
        // A list that fits one page has no cursor.
        let bob = try api.activeDevice(user: "bob", key: try ServerTestKeys.key("bob-1"))
        let bobList = try api.authorized("GET", "/v1/devices", token: bob)
        #expect(bobList.json?["devices"]?.arrayValue?.count == 1)
        #expect(bobList.json?["next_cursor"] == nil)

        let validCursor = try #require(first.json?["next_cursor"]?.stringValue)
        for bad: [String: String] in [
            ["limit": "0"], ["limit": "101"], ["limit": "-1"], ["limit": "ten"], ["limit": ""], ["cursor": ""],
            ["cursor": "!!!"], ["cursor": validCursor + "A"], ["cursor": Base64URL.encode(Array("12345".utf8))],
            ["cursor": Base64URL.encode(Array("x.\(try ServerTestKeys.key("alice-1").publicKey.fingerprint)".utf8))],
            ["cursor": Base64URL.encode(Array("5.not-a-kid".utf8))],
        ] {
            let response = try page(bad)
            #expect(response.status == 400, "\(bad)")
            #expect(response.errorCode == "invalid_request", "\(bad)")
        }
    }

    @Test("a device records the address it registered from; list and approval show it with name and time")
    func registeredFrom() throws {
        let environment = TestEnvironment()
        var api = try environment.directAPI { $0.trustProxy = true }
        let token = try api.activeDevice(user: "alice", key: try ServerTestKeys.key("alice-1"))
        environment.clock.advance(by: 5)
        api.clientAddress = "10.0.0.2"
        let phone = try ServerTestKeys.key("alice-2")
        let body: JSONValue = .object([
            "user": "alice", "name": "alice-phone", "public_key": .string(phone.publicKey.pemRepresentation),
            "proof": .string(try api.assertion(phone)),
        ])
        let registered = try api.registerBody(
            body, headers: ["Content-Type": "application/json", "X-Forwarded-For": "192.0.2.99, 203.0.113.50"])
        #expect(registered.status == 202)

        let list = try api.authorized("GET", "/v1/devices", token: token)
        let devices = try #require(list.json?["devices"]?.arrayValue)
        #expect(devices.map { $0["registered_from"] } == [.string("192.0.2.1"), .string("203.0.113.50")])

        let approved = try api.approveDevice(
            phone.publicKey.fingerprint, approver: try ServerTestKeys.key("alice-1"), token: token)
        #expect(approved.status == 200)
        #expect(approved.json?["kid"]?.stringValue == phone.publicKey.fingerprint)
        #expect(approved.json?["user"]?.stringValue == "alice")
        #expect(approved.json?["name"]?.stringValue == "alice-phone")
        #expect(approved.json?["status"]?.stringValue == "active")
        #expect(approved.json?["created_at"]?.stringValue == "2027-01-15T08:00:05Z")
        #expect(approved.json?["registered_from"]?.stringValue == "203.0.113.50")

        // Without --trust-proxy the header is the client's word and is ignored; records from
        // before the address was kept show null.
        let direct = try environment.directAPI()
        let stranger = try ServerTestKeys.key("stranger")
        let plain = try direct.registerBody(
            .object([
                "user": "carol", "name": "n", "public_key": .string(stranger.publicKey.pemRepresentation),
                "proof": .string(try direct.assertion(stranger)),
            ]), headers: ["Content-Type": "application/json", "X-Forwarded-For": "192.0.2.99"])
        #expect(plain.status == 201)
        #expect(try direct.storage.device(kid: stranger.publicKey.fingerprint)?.registeredFrom == "192.0.2.1")
        var legacy = try #require(try direct.storage.device(kid: stranger.publicKey.fingerprint))
        legacy.kid = try Base64URL.encode(CryptoPrimitives.sha256(Array("legacy".utf8)))
        legacy.registeredFrom = nil
        // A second later, so that it is listed second: in the same second the order would be by
        // kid, and the test keys (so their kids) are new in every run.
        legacy.createdAt += 1
        #expect(try direct.storage.insertDevice(legacy))
        let carol = try direct.accessToken(stranger)
        let carolList = try direct.authorized("GET", "/v1/devices", token: carol)
        #expect(carolList.json?["devices"]?.arrayValue?.map { $0["registered_from"] } == [.string("192.0.2.1"), .null])
    }
}
