import Foundation
import KeyAuth
import KeyAuthServer
import KeyAuthTestSupport

/// A client application's credentials, as `keyauth-server clients add` prints them.
struct TestClient: Sendable {
    let id: String
    let secret: String

    /// `Authorization: Basic` for `client_secret_basic` (RFC 6749 section 2.3.1).
    var basic: String {
        "Basic " + Data("\(TestAPI.formEncode(id)):\(TestAPI.formEncode(secret))".utf8).base64EncodedString()
    }
}

/// The requests of sign-in by approval: a client application's, and a device's.
extension TestAPI {
    static let cibaGrant = "urn:openid:params:grant-type:ciba"

    /// Adds a client application named `name` to the server's storage.
    func addClient(_ name: String = "Support desk") throws -> TestClient {
        let (client, secret) = try ClientRegistry(storage: storage, now: clock.closure).add(name: name)
        guard let secret else { throw TestFailure("a confidential client has a secret") }
        return TestClient(id: client.id, secret: secret)
    }

    /// A form POST with `client` authenticated by `client_secret_basic` (nil: no credentials).
    func clientPost(
        _ path: String, client: TestClient?, form: [(String, String)], headers extra: HTTPHeaders = HTTPHeaders()
    ) throws -> HTTPResponse {
        var headers = extra
        headers.set("Content-Type", "application/x-www-form-urlencoded")
        if let client { headers.add("Authorization", client.basic) }
        let body = form.map { "\(Self.formEncode($0.0))=\(Self.formEncode($0.1))" }.joined(separator: "&")
        return try send("POST", path, headers: headers, body: Array(body.utf8))
    }

    /// `POST /bc-authorize` for `user`.
    func backchannelAuthorize(
        _ client: TestClient?, user: String, extra: [(String, String)] = []
    ) throws -> HTTPResponse {
        try clientPost("/bc-authorize", client: client, form: [("login_hint", user)] + extra)
    }

    /// Starts a request for `user` and returns its `auth_req_id`.
    func startSignIn(_ client: TestClient, user: String, bindingMessage: String = "AB12") throws -> String {
        let response = try backchannelAuthorize(client, user: user, extra: [("binding_message", bindingMessage)])
        guard response.status == 200, let id = response.json?["auth_req_id"]?.stringValue else {
            throw TestFailure("bc-authorize failed: \(response.status) \(response.text)")
        }
        return id
    }

    /// The client's poll of the token endpoint.
    func poll(_ client: TestClient?, id: String) throws -> HTTPResponse {
        try clientPost("/oauth/token", client: client, form: [("grant_type", Self.cibaGrant), ("auth_req_id", id)])
    }

    /// An approval assertion of `key` for the request `id`, carrying its code as the user would
    /// type it from the screen that started the sign-in: read from storage (the device's list
    /// does not show it) unless `code` is given.
    func approvalAssertion(
        _ key: RSAPrivateKey, id: String, methods: [String] = ["swk", "pin"], code: String? = nil,
        claims: [String: JSONValue] = [:]
    ) throws -> String {
        var all: [String: JSONValue] = [
            "auth_req_id": .string(id), "amr": .array(methods.map(JSONValue.string)),
            "binding_code": .string(try code ?? self.code(of: id)),
        ]
        for (name, value) in claims { all[name] = value }
        return try assertion(key, claims: all)
    }

    /// The code the screen that started request `id` shows (its binding message), from storage;
    /// "" for an unknown request.
    func code(of id: String) throws -> String {
        try storage.signInRequest(id: id)?.bindingMessage ?? ""
    }

    /// `POST /v1/auth-requests/{id}/code` with the device's `token`.
    func checkCode(_ id: String, code: String, token: String) throws -> HTTPResponse {
        try send(
            "POST", "/v1/auth-requests/\(id)/code",
            headers: ["Content-Type": "application/json", "Authorization": "Bearer \(token)"],
            body: Array(JSONValue.object(["code": .string(code)]).serialized().utf8))
    }

    /// `POST /v1/devices/{kid}/approve` with the approving device's `token` and a fresh assertion
    /// of its key `approver` naming the pending device (nil: a token alone).
    func approveDevice(
        _ kid: String, approver: RSAPrivateKey?, token: String, methods: [String] = ["swk", "pin"]
    ) throws -> HTTPResponse {
        var body: [UInt8] = []
        var headers: HTTPHeaders = ["Authorization": "Bearer \(token)"]
        if let approver {
            let assertion = try assertion(
                approver, claims: ["approve_kid": .string(kid), "amr": .array(methods.map(JSONValue.string))])
            body = Array(JSONValue.object(["assertion": .string(assertion)]).serialized().utf8)
            headers.set("Content-Type", "application/json")
        }
        return try send("POST", "/v1/devices/\(kid)/approve", headers: headers, body: body)
    }

    /// `POST /v1/auth-requests/{id}` with the device's `token`.
    func answer(_ id: String, decision: String, assertion: String?, token: String) throws -> HTTPResponse {
        var body: [String: JSONValue] = ["decision": .string(decision)]
        if let assertion { body["assertion"] = .string(assertion) }
        return try send(
            "POST", "/v1/auth-requests/\(id)",
            headers: ["Content-Type": "application/json", "Authorization": "Bearer \(token)"],
            body: Array(JSONValue.object(body).serialized().utf8))
    }

    /// `GET /v1/auth-requests` with the device's `token`.
    func openRequests(token: String, query: [String: String] = [:]) throws -> HTTPResponse {
        try authorized("GET", "/v1/auth-requests", query: query, token: token)
    }
}
