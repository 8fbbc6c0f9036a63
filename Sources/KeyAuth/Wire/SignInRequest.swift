/// A request to sign the user in somewhere, as the user's devices see it (`GET /v1/auth-requests`,
/// PROTOCOL.md section 8): who asks, where it came from and how long it can be answered.
///
/// It carries no code: the code is shown only on the screen that started the sign-in, and the
/// user types it on the device (number matching), so a user approving by habit cannot just copy
/// what the device shows.
package struct SignInRequest: Sendable, Hashable {
    /// What a request asks for.
    package struct Kind: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
        package let rawValue: String
        package init(rawValue: String) { self.rawValue = rawValue }
        package var description: String { rawValue }

        /// A registered client application's sign-in (CIBA).
        package static let backchannel = Kind(rawValue: "backchannel")
        /// A sign-in to keyauth-server's own account page.
        package static let account = Kind(rawValue: "account")
        /// A sign-in to a web application through keyauth (OpenID Connect).
        package static let authorization = Kind(rawValue: "authorization")
        /// The account page asks to approve a new device of the user.
        package static let device = Kind(rawValue: "device")
        /// The account page asks to make a new set of recovery codes.
        package static let recoveryCodes = Kind(rawValue: "recovery-codes")
        /// A notice that a recovery code enrolled a new device: denying it revokes that device.
        package static let recovery = Kind(rawValue: "recovery")

        /// Whether approving a request of this kind needs a presence check on the device: it
        /// changes who can use the account, not only who is signed in.
        package var needsPresence: Bool { self == .device || self == .recoveryCodes }
    }

    /// The request's id (the `auth_req_id` of a CIBA request): what an answer names.
    package let id: String
    /// What it asks for.
    package let kind: Kind
    /// Who asks, as the server describes it: the application's registered name (with the host a
    /// web sign-in redirects to), or what the account page asks to approve.
    package let clientName: String
    /// The address the request came from, as the server saw it.
    package let requestedFrom: String?
    /// The scope the application asked for, if any.
    package let scope: String?
    /// When it was made and when it expires, RFC 3339 UTC as the server wrote them.
    package let createdAt: String
    /// See ``createdAt``.
    package let expiresAt: String

    /// Creates a request entry.
    package init(
        id: String, kind: Kind, clientName: String, requestedFrom: String?, scope: String?, createdAt: String,
        expiresAt: String
    ) {
        self.id = id
        self.kind = kind
        self.clientName = clientName
        self.requestedFrom = requestedFrom
        self.scope = scope
        self.createdAt = createdAt
        self.expiresAt = expiresAt
    }

    /// The members of a list entry.
    package var jsonValue: JSONValue {
        .object([
            "id": .string(id), "kind": .string(kind.rawValue), "client_name": .string(clientName),
            "requested_from": requestedFrom.map(JSONValue.string) ?? .null,
            "scope": scope.map(JSONValue.string) ?? .null, "created_at": .string(createdAt),
            "expires_at": .string(expiresAt),
        ])
    }

    /// Reads a list entry as a client. A `binding_message` from an older server is ignored: the
    /// device does not show the code.
    ///
    /// - Throws: ``WireFormatError`` for a missing id, client name or time, or an id that is not
    ///   base64url (it goes into a URL path).
    package init(jsonValue entry: JSONValue) throws(WireFormatError) {
        guard let id = entry["id"]?.stringValue, InputRules.isValidSignInRequestID(id),
            let clientName = entry["client_name"]?.stringValue, let createdAt = entry["created_at"]?.stringValue,
            let expiresAt = entry["expires_at"]?.stringValue
        else { throw WireFormatError("has no valid id, client_name, created_at or expires_at") }
        self.init(
            id: id, kind: Kind(rawValue: entry["kind"]?.stringValue ?? Kind.backchannel.rawValue),
            clientName: clientName, requestedFrom: entry["requested_from"]?.stringValue,
            scope: entry["scope"]?.stringValue, createdAt: createdAt, expiresAt: expiresAt)
    }
}

/// `GET /v1/auth-requests`: the user's open requests, oldest first, and the cursor a watching
/// device passes back as `after` to wait for newer ones.
package struct SignInRequestList: Sendable, Hashable {
    /// The open requests.
    package let requests: [SignInRequest]
    /// The position of the newest request the server knows of (opaque).
    package let cursor: String

    /// Creates a list.
    package init(requests: [SignInRequest], cursor: String) {
        self.requests = requests
        self.cursor = cursor
    }

    /// `{"requests":[...],"cursor":"..."}`.
    package var jsonValue: JSONValue {
        .object(["requests": .array(requests.map(\.jsonValue)), "cursor": .string(cursor)])
    }

    /// Reads a list as a client.
    ///
    /// - Throws: ``WireFormatError`` for a missing array or cursor, or an entry
    ///   ``SignInRequest/init(jsonValue:)`` refuses.
    package init(jsonValue object: JSONValue) throws(WireFormatError) {
        guard let entries = object["requests"]?.arrayValue, let cursor = object["cursor"]?.stringValue,
            cursor.utf8.count <= 256
        else { throw WireFormatError("has no requests array or cursor") }
        var requests: [SignInRequest] = []
        for entry in entries {
            do {
                requests.append(try SignInRequest(jsonValue: entry))
            } catch {
                throw WireFormatError(error.problem, isInEntry: true)
            }
        }
        self.init(requests: requests, cursor: cursor)
    }
}

/// What a device answers to a sign-in request.
package enum SignInDecision: String, Sendable, Hashable {
    /// Sign the user in: needs a fresh device assertion naming the request.
    case approve
    /// Refuse it.
    case deny
}

/// How a device says it checked the user, in RFC 8176's vocabulary: the `amr` claim of an
/// approval assertion, copied into the access token the application gets.
///
/// The server cannot verify any of it (no attestation yet): it is the approving device's
/// statement, signed by its key.
package enum AuthenticationMethod: String, Sendable, Hashable, CaseIterable {
    /// A hardware-held key: the device key lives in a TPM.
    case hardwareKey = "hwk"
    /// A software key: the device key is a file.
    case softwareKey = "swk"
    /// A PIN (which with keyauth also decrypts the key file).
    case pin
    /// A user-presence test: a PAM conversation, whatever the stack asked.
    case userPresence = "user"

    /// The claim of an approval assertion that names the request it approves.
    package static let requestClaim = "auth_req_id"
    /// The claim of a device approval's assertion that names the pending device it approves.
    package static let approvedDeviceClaim = "approve_kid"
    /// The claim of the assertion that asks for new recovery codes: the user they are for.
    package static let recoveryCodesClaim = "recovery_codes"
    /// The claim of a sign-in approval's assertion that carries the code the user typed.
    package static let codeClaim = "binding_code"

    /// The values that say the device checked its user (a PIN, a PAM conversation), beyond
    /// holding the key.
    package static let presenceChecks: Set<String> = [pin.rawValue, userPresence.rawValue]

    /// Whether `methods` is a statement keyauth accepts: exactly one key kind (`hwk` or `swk`),
    /// at most one presence check, nothing else and nothing twice.
    package static func isValidStatement(_ methods: [String]) -> Bool {
        let known = methods.compactMap(AuthenticationMethod.init(rawValue:))
        guard known.count == methods.count, Set(known).count == known.count else { return false }
        let keys = known.filter { $0 == .hardwareKey || $0 == .softwareKey }
        return keys.count == 1 && known.count <= 2
    }
}
