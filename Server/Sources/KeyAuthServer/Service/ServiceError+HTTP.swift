import KeyAuth

extension ServiceError.Kind {
    /// The HTTP status and OAuth error code of each kind (PROTOCOL.md section 6).
    var statusAndCode: (status: Int, code: String) {
        switch self {
        case .invalidRequest: (400, "invalid_request")
        case .unsupportedGrantType: (400, "unsupported_grant_type")
        case .invalidGrant: (400, "invalid_grant")
        case .authorizationPending: (400, "authorization_pending")
        case .deviceDenied: (400, "access_denied")
        case .expiredToken: (400, "expired_token")
        case .invalidToken: (401, "invalid_token")
        case .accessDenied: (403, "access_denied")
        case .notFound: (404, "not_found")
        case .methodNotAllowed: (405, "method_not_allowed")
        case .keyConflict: (409, "invalid_request")
        case .payloadTooLarge: (413, "invalid_request")
        case .slowDown: (429, "slow_down")
        }
    }
}

extension HTTPResponse {
    /// The error response for any failure: the one place that maps domain errors to HTTP
    /// (PROTOCOL.md section 6).
    ///
    /// ``ServiceError`` maps by kind; ``StorageError`` becomes 503 `temporarily_unavailable`
    /// with `Retry-After`; anything else is a bug and becomes 500 `server_error` without detail.
    init(error: any Error) {
        let status: Int
        let code: String
        let description: String
        var headers = HTTPHeaders()
        switch error {
        case let error as ServiceError:
            (status, code) = error.kind.statusAndCode
            description = error.description
            switch error.kind {
            case .invalidToken: headers.set("WWW-Authenticate", "Bearer error=\"invalid_token\"")
            case .methodNotAllowed(let allowed): headers.set("Allow", allowed.joined(separator: ", "))
            case .slowDown(let retryAfter): headers.set("Retry-After", String(max(retryAfter, 1)))
            default: break
            }
        case is StorageError:
            (status, code) = (503, "temporarily_unavailable")
            description = "the server's storage is unavailable; try again later"
            headers.set("Retry-After", "5")
        default:
            (status, code) = (500, "server_error")
            description = "internal server error"
        }
        self = .json(
            .object(["error": .string(code), "error_description": .string(description)]), status: status,
            headers: headers)
    }
}
