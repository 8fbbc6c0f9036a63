import KeyAuth

extension ServiceError.Kind {
    /// The HTTP status and OAuth error code of each kind (PROTOCOL.md section 6).
    var statusAndCode: (status: Int, code: OAuthError.Code) {
        switch self {
        case .invalidRequest: (400, .invalidRequest)
        case .unsupportedGrantType: (400, .unsupportedGrantType)
        case .invalidGrant: (400, .invalidGrant)
        case .authorizationPending: (400, .authorizationPending)
        case .deviceDenied: (400, .accessDenied)
        case .expiredToken: (400, .expiredToken)
        case .invalidToken: (401, .invalidToken)
        case .accessDenied: (403, .accessDenied)
        case .unknownDevice: (404, .notFound)
        case .keyConflict: (409, .invalidRequest)
        case .slowDown: (429, .slowDown)
        case .busy: (503, .temporarilyUnavailable)
        case .invalidDPoPProof(let atResource): (atResource ? 401 : 400, .invalidDPoPProof)
        case .useDPoPNonce(_, let atResource): (atResource ? 401 : 400, .useDPoPNonce)
        case .invalidClient: (401, .invalidClient)
        case .unknownUserID: (400, .unknownUserID)
        case .invalidBindingMessage: (400, .invalidBindingMessage)
        case .invalidScope: (400, .invalidScope)
        case .pollTooFast: (400, .slowDown)
        case .unknownSignInRequest: (404, .notFound)
        case .alreadyAnswered: (409, .alreadyAnswered)
        case .wrongCode: (400, .wrongCode)
        }
    }
}

extension RoutingError.Kind {
    /// The HTTP status and OAuth error code of each kind (PROTOCOL.md section 6).
    var statusAndCode: (status: Int, code: OAuthError.Code) {
        switch self {
        case .notFound: (404, .notFound)
        case .methodNotAllowed: (405, .methodNotAllowed)
        case .payloadTooLarge: (413, .invalidRequest)
        }
    }
}

extension HTTPResponse {
    /// The HTTP status and OAuth error code `error` is answered with (PROTOCOL.md section 6), as
    /// ``init(error:)`` sends them and the request log records them.
    static func statusAndCode(for error: any Error) -> (status: Int, code: OAuthError.Code) {
        switch error {
        case let error as ServiceError: error.kind.statusAndCode
        case let error as RoutingError: error.kind.statusAndCode
        case is StorageError: (503, .temporarilyUnavailable)
        default: (500, .serverError)
        }
    }

    /// The error response for any failure: the one place that maps errors to HTTP (PROTOCOL.md
    /// section 6).
    ///
    /// ``ServiceError`` and ``RoutingError`` map by kind; ``StorageError`` becomes 503
    /// `temporarily_unavailable` with `Retry-After`; anything else is a bug and becomes 500
    /// `server_error` without detail.
    init(error: any Error) {
        let (status, code) = Self.statusAndCode(for: error)
        let description: String
        var headers = HTTPHeaders()
        var members: [String: JSONValue] = [:]
        switch error {
        case let error as ServiceError:
            description = error.description
            switch error.kind {
            case .invalidToken: headers.setChallenge(.bearer(error: .invalidToken))
            case .slowDown(let retryAfter), .busy(let retryAfter):
                headers.set("Retry-After", String(max(retryAfter, 1)))
            case .invalidDPoPProof(let atResource):
                if atResource { headers.setChallenge(.dpop(error: .invalidDPoPProof)) }
            case .useDPoPNonce(let nonce, let atResource):
                headers.set("DPoP-Nonce", nonce)
                if atResource { headers.setChallenge(.dpop(error: .useDPoPNonce)) }
            // RFC 6749 section 5.2: a 401 for client authentication names the scheme to use.
            case .invalidClient: headers.setChallenge(AuthenticationChallenge("Basic", ["realm": "keyauth"]))
            case .wrongCode(let left): members["attempts_left"] = .integer(Int64(left))
            default: break
            }
        case let error as RoutingError:
            description = error.description
            if case .methodNotAllowed(let allowed) = error.kind {
                headers.set("Allow", allowed.joined(separator: ", "))
            }
        case is StorageError:
            description = Self.storageUnavailableDescription
            headers.set("Retry-After", "5")
        default:
            description = "internal server error"
        }
        members["error"] = .string(code.rawValue)
        members["error_description"] = .string(description)
        self = .json(.object(members), status: status, headers: headers)
    }

    /// The description of every storage failure's 503: what went wrong stays in the log.
    static let storageUnavailableDescription = "the server's storage is unavailable; try again later"
}
