import KeyAuth

/// A `WWW-Authenticate` challenge (RFC 7235 section 4.1): a scheme and its parameters, each value
/// sent as a quoted-string.
///
/// Every challenge the server sends is built here, so that no site writes quotes by hand: an
/// `error_description` holds text the server did not fully choose (a token's failed check), and
/// a `"` in it would end the quoted value early and let the rest read as parameters of its own.
struct AuthenticationChallenge: Sendable, Equatable {
    /// `Bearer`, `DPoP` or `Basic`.
    var scheme: String
    /// The auth-params in order: name, then the value before quoting.
    var parameters: [Parameter]

    /// One auth-param.
    struct Parameter: Sendable, Equatable {
        var name: String
        var value: String
    }

    init(_ scheme: String, _ parameters: KeyValuePairs<String, String> = [:]) {
        self.scheme = scheme
        self.parameters = parameters.map { Parameter(name: $0.key, value: $0.value) }
    }

    /// A Bearer challenge (RFC 6750 section 3) with an error code and, when given, its
    /// description; `realm` first when given.
    static func bearer(
        realm: String? = nil, error: OAuthError.Code? = nil, description: String? = nil, scope: String? = nil
    ) -> AuthenticationChallenge {
        var challenge = AuthenticationChallenge("Bearer")
        if let realm { challenge.parameters.append(Parameter(name: "realm", value: realm)) }
        if let error { challenge.parameters.append(Parameter(name: "error", value: error.rawValue)) }
        if let description { challenge.parameters.append(Parameter(name: "error_description", value: description)) }
        if let scope { challenge.parameters.append(Parameter(name: "scope", value: scope)) }
        return challenge
    }

    /// The challenge of a resource endpoint's DPoP error (RFC 9449 section 7.1), with the
    /// algorithms proofs may use.
    static func dpop(error: OAuthError.Code) -> AuthenticationChallenge {
        AuthenticationChallenge(
            "DPoP", ["error": error.rawValue, "algs": JWSAlgorithm.allCases.map(\.rawValue).joined(separator: " ")])
    }

    /// The field value: `scheme name="value", ...`.
    var headerValue: String {
        guard !parameters.isEmpty else { return scheme }
        return scheme + " " + parameters.map { "\($0.name)=\(Self.quoted($0.value))" }.joined(separator: ", ")
    }

    /// `text` as an RFC 7230 section 3.2.6 quoted-string: `"` and `\` escaped with a backslash,
    /// and control characters (which no quoted-string may hold, and which in a header would end
    /// the field) replaced by a space.
    static func quoted(_ text: String) -> String {
        var output = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"", "\\":
                output += "\\"
                output.unicodeScalars.append(scalar)
            case _ where scalar.value < 0x20 || scalar.value == 0x7F:
                output += " "
            default:
                output.unicodeScalars.append(scalar)
            }
        }
        return output + "\""
    }
}

extension HTTPHeaders {
    /// Sets `WWW-Authenticate` to `challenge`, replacing any other.
    mutating func setChallenge(_ challenge: AuthenticationChallenge) {
        set("WWW-Authenticate", challenge.headerValue)
    }
}
