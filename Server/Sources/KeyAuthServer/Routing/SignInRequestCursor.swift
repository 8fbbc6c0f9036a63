import KeyAuth

/// The `cursor` of `GET /v1/auth-requests` and its `after` parameter (PROTOCOL.md section 8): the
/// position of the newest request a device has seen, in base64url, read back only as this
/// server wrote it. A watching device passes it back to wait for a request newer than those.
enum SignInRequestCursor {
    /// The cursor text for `position`.
    static func encode(_ position: SignInRequestPosition) -> String {
        PositionCursor.encode(createdAt: position.createdAt, id: position.id)
    }

    /// The position in `cursor`, or nil when it is not one this server writes (the start of the
    /// list has an empty id).
    static func decode(_ cursor: String) -> SignInRequestPosition? {
        PositionCursor.decode(cursor) { $0.isEmpty || InputRules.isValidSignInRequestID($0) }.map {
            SignInRequestPosition(createdAt: $0.createdAt, id: $0.id)
        }
    }
}

extension HTTPRequest {
    /// The longest long poll, in seconds (RFC 6202 section 5.5 recommends 30).
    static let maximumSignInRequestWait = 30

    /// `wait` (0 to 30 seconds, default 0) and `after` (a cursor) of `GET /v1/auth-requests`.
    ///
    /// - Throws: `.invalidRequest` for a wait out of range or a cursor this server did not write.
    func signInRequestQuery() throws(ServiceError) -> (wait: Int, after: SignInRequestPosition) {
        var wait = 0
        if let text = query["wait"] {
            guard let seconds = Int(text), (0...Self.maximumSignInRequestWait).contains(seconds) else {
                throw ServiceError(
                    .invalidRequest, "wait must be a number of seconds from 0 to \(Self.maximumSignInRequestWait)")
            }
            wait = seconds
        }
        var after = SignInRequestPosition.start
        if let cursor = query["after"] {
            guard let position = SignInRequestCursor.decode(cursor) else {
                throw ServiceError(.invalidRequest, "after is not a cursor this server gave out")
            }
            after = position
        }
        return (wait, after)
    }

    /// The body of `POST /v1/auth-requests/{id}`: `{"decision": "approve"|"deny", "assertion": ...}`.
    ///
    /// - Throws: `.invalidRequest` for another content type, a body that is not such an object.
    func signInAnswer() throws(ServiceError) -> (decision: SignInDecision, assertion: String?) {
        try requireContentType("application/json")
        guard let object = try? JSONValue(parsing: body).objectValue,
            let decision = object["decision"]?.stringValue.flatMap(SignInDecision.init(rawValue:))
        else { throw ServiceError(.invalidRequest, "the body must be {\"decision\": \"approve\" or \"deny\", ...}") }
        return (decision, try Self.optionalString("assertion", in: object))
    }

    /// The code of `POST /v1/auth-requests/{id}/code`: `{"code": "..."}`.
    ///
    /// - Throws: `.invalidRequest` for another content type, or a body without a string `code`.
    func signInCode() throws(ServiceError) -> String {
        try requireContentType("application/json")
        guard let object = try? JSONValue(parsing: body).objectValue, let code = object["code"]?.stringValue,
            code.utf8.count <= 512
        else { throw ServiceError(.invalidRequest, "the body must be {\"code\": \"...\"}") }
        return code
    }

    /// The assertion of `POST /v1/devices/{kid}/approve`: `{"assertion": "..."}`, or nil for an
    /// empty body (which the service refuses, saying what is needed).
    ///
    /// - Throws: `.invalidRequest` for a body that is not such an object.
    func deviceApproval() throws(ServiceError) -> String? {
        guard !body.isEmpty else { return nil }
        try requireContentType("application/json")
        guard let object = try? JSONValue(parsing: body).objectValue else {
            throw ServiceError(.invalidRequest, "the body must be {\"assertion\": \"...\"}")
        }
        return try Self.optionalString("assertion", in: object)
    }

    /// Member `name` of `object`: a string, or nil when absent or `null`.
    private static func optionalString(_ name: String, in object: [String: JSONValue]) throws(ServiceError) -> String? {
        switch object[name] {
        case nil, .null?: return nil
        case .string(let value)?: return value
        default: throw ServiceError(.invalidRequest, "\(name) must be a string")
        }
    }
}
