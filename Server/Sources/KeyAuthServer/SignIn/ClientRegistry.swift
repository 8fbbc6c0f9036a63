import KeyAuth

/// The client applications that may ask a user to approve a sign-in (PROTOCOL.md section 8):
/// added by the administrator, authenticated by their secret on every request.
///
/// A `client_id` is 128 random bits and a `client_secret` 256, both base64url. Storage keeps the
/// secret's SHA-256 only: with that much entropy a fast unsalted hash already leaves nothing to
/// guess from a copy of the database (salt and stretching protect low-entropy passwords), and
/// checking costs one hash. Hashes are compared in constant time, and an unknown client is
/// compared against a stand-in hash, so a wrong secret and an unknown id cost the same.
package struct ClientRegistry: Sendable {
    /// Random bytes of a client id.
    package static let idBytes = 16
    /// Random bytes of a client secret.
    package static let secretBytes = 32
    /// The longest client name, in characters.
    package static let maximumNameLength = NameRule.deviceName.maximumCharacters

    let storage: any ServerStorage
    let now: @Sendable () -> Int64

    /// - Parameters:
    ///   - storage: where clients are kept.
    ///   - now: the clock.
    package init(storage: any ServerStorage, now: @escaping @Sendable () -> Int64 = ServerClock.now) {
        self.storage = storage
        self.now = now
    }

    /// Adds a client named `name`.
    ///
    /// - Parameters:
    ///   - redirectURIs: where the authorization endpoint may send a browser back (OpenID
    ///     Connect); none for a CIBA-only client.
    ///   - postLogoutRedirectURIs: where `/end-session` may send a browser.
    ///   - isPublic: a public client (a native app) gets no secret and must use PKCE.
    ///   - kind: `host` for a host's `pam_keyauth` (push login), which has neither redirect
    ///     URIs nor `isPublic`.
    ///   - allowedUsers: for a host, the users who may log in to it (``HostClients``); none
    ///     allows every user.
    /// - Returns: the record and the secret, which is shown once and never stored; nil for a
    ///   public client.
    /// - Throws: ``ServerConfigurationError`` for a name that the device name rule refuses
    ///   (PROTOCOL.md section 4; the name is stored in NFC), a redirect URI ``RedirectURI``
    ///   refuses, or a public client without redirect URIs; ``StorageError``; `KeyAuthError`
    ///   when the random generator fails.
    package func add(
        name requestedName: String, redirectURIs: [String] = [], postLogoutRedirectURIs: [String] = [],
        isPublic: Bool = false, kind: ClientKind = .application, allowedUsers: [String] = []
    ) throws -> (client: ClientRecord, secret: String?) {
        let name: String
        do {
            name = try NameRule.deviceName.normalize(requestedName)
        } catch {
            throw ServerConfigurationError("the client name \(error)")
        }
        for uri in redirectURIs + postLogoutRedirectURIs {
            if let problem = RedirectURI.problem(with: uri) { throw ServerConfigurationError("\(uri): \(problem)") }
        }
        guard !isPublic || !redirectURIs.isEmpty else {
            throw ServerConfigurationError("a public client needs at least one --redirect-uri")
        }
        guard kind != .host || (redirectURIs.isEmpty && postLogoutRedirectURIs.isEmpty && !isPublic) else {
            throw ServerConfigurationError("a host client has no redirect URIs and is not public")
        }
        try HostClients.checkAllowedUsers(allowedUsers, kind: kind)
        let secret = isPublic ? nil : Base64URL.encode(try CryptoPrimitives.randomBytes(count: Self.secretBytes))
        let client = ClientRecord(
            id: Base64URL.encode(try CryptoPrimitives.randomBytes(count: Self.idBytes)), name: name,
            secretHash: try secret.map { (secret) throws(KeyAuthError) in try Self.hash(secret) } ?? [],
            createdAt: now(), redirectURIs: redirectURIs,
            postLogoutRedirectURIs: postLogoutRedirectURIs, isPublic: isPublic, kind: kind, allowedUsers: allowedUsers)
        guard try storage.insertClient(client) else {
            throw ServerConfigurationError("a client id collided; run the command again", status: 1)
        }
        return (client, secret)
    }

    /// Every client, oldest first.
    package func list() throws(StorageError) -> [ClientRecord] {
        try storage.allClients()
    }

    /// Removes a client; false when there is none with that id.
    package func remove(id: String) throws(StorageError) -> Bool {
        try storage.deleteClient(id: id)
    }

    /// The client that `credentials` authenticate.
    ///
    /// - Throws: ``ServiceError`` `.invalidClient` for no credentials, an unknown client or a
    ///   wrong secret, all with one description; ``StorageError``.
    func authenticate(_ credentials: ClientCredentials?) throws -> ClientRecord {
        let refused = ServiceError(.invalidClient, "client authentication failed")
        guard let credentials else { throw refused }
        let presented = try Self.hash(credentials.secret)
        let stored = try storage.client(id: credentials.id)
        let expected = stored?.secretHash ?? Self.standInHash
        guard CryptoPrimitives.constantTimeEquals(presented, expected), let stored, !stored.isPublic else {
            throw refused
        }
        return stored
    }

    /// The client of a token request at the token endpoint's code grant: a confidential client
    /// by its `credentials` (as ``authenticate(_:)``), a public one by its `client_id` alone.
    ///
    /// - Throws: ``ServiceError`` `.invalidClient` for an unknown client, a confidential client
    ///   without or with wrong credentials, or a public client that sends a secret.
    func identify(credentials: ClientCredentials?, publicID: String?) throws -> ClientRecord {
        if credentials != nil || publicID == nil { return try authenticate(credentials) }
        guard let publicID, let client = try storage.client(id: publicID), client.isPublic else {
            throw ServiceError(.invalidClient, "client authentication failed")
        }
        return client
    }

    /// The stored form of a secret.
    static func hash(_ secret: String) throws(KeyAuthError) -> [UInt8] {
        try CryptoPrimitives.sha256(Array(secret.utf8))
    }

    /// What an unknown client's secret is compared with: a hash no secret has.
    private static let standInHash = [UInt8](repeating: 0, count: 32)
}

/// A client's `client_id` and `client_secret`, from an `Authorization: Basic` header
/// (`client_secret_basic`) or from the form body (`client_secret_post`).
struct ClientCredentials: Sendable, Equatable {
    let id: String
    let secret: String
}
