import KeyAuth

/// A parsed `POST /v1/devices` body.
struct RegistrationRequest: Sendable {
    var user: String
    var publicKeyPEM: String
    var name: String
    var proof: String
    var enrollmentCode: String?

    /// Reads and checks the JSON body's fields (types, user and name syntax).
    ///
    /// - Throws: ``ServiceError`` `.invalidRequest` naming the field, never echoing its value.
    init(json body: [UInt8]) throws(ServiceError) {
        guard let object = try? JSONValue(parsing: body).objectValue else {
            throw ServiceError(.invalidRequest, "the body must be a JSON object")
        }
        func string(_ field: String) throws(ServiceError) -> String {
            guard let value = object[field]?.stringValue else {
                throw ServiceError(.invalidRequest, "the field \"\(field)\" is missing or not a string")
            }
            return value
        }
        user = try string("user")
        publicKeyPEM = try string("public_key")
        name = try string("name")
        proof = try string("proof")
        switch object["enrollment_code"] {
        case nil, .null?: enrollmentCode = nil
        case .string(let code)?: enrollmentCode = code.isEmpty ? nil : code
        default: throw ServiceError(.invalidRequest, "the field \"enrollment_code\" must be a string")
        }
        guard InputRules.isValidUser(user) else {
            throw ServiceError(.invalidRequest, "\"user\" must be 1 to 64 characters of A-Z a-z 0-9 . _ @ -")
        }
        guard InputRules.isValidDeviceName(name) else {
            throw ServiceError(.invalidRequest, "\"name\" must be 1 to 64 printable characters")
        }
    }
}

/// What a registration did.
enum RegistrationOutcome: Sendable, Equatable {
    /// A new active device (201).
    case active(DeviceRecord)
    /// A new device waiting for approval (202).
    case pending(DeviceRecord)
    /// The same key was already registered to the same user (200, idempotent).
    case existing(DeviceRecord)
}

extension KeyAuthService {
    /// Registers a device key (PROTOCOL.md section 4, "Register").
    ///
    /// Order matters: the cheap syntax checks, then proof of possession (so that nobody can
    /// learn anything about a key they do not hold), then the registry, and the enrollment code
    /// is used up only when the device is about to be stored.
    func register(_ request: RegistrationRequest) throws -> RegistrationOutcome {
        if request.publicKeyPEM.contains("PRIVATE KEY") {
            // Refused before parsing; the text is never stored or logged.
            throw ServiceError(.invalidRequest, "a private key was sent; send only the public key")
        }
        let key: RSAPublicKey
        do {
            key = try RSAPublicKey(pemRepresentation: request.publicKeyPEM)
            try key.checkPolicy(allowedBits: 2048...8192)
        } catch {
            let reason = error.code == .keyRejected ? error.message : "it is not an SPKI PEM RSA public key"
            throw ServiceError(.invalidRequest, "the public key is not accepted: \(reason)")
        }
        let kid = key.fingerprint
        // Proof of possession: an assertion signed by the submitted key, whose kid is that key's
        // fingerprint (any other kid resolves to nothing).
        _ = try verifyAssertion(request.proof, resolver: SingleKeyResolver(key: key, keyID: kid))

        if let existing = try storage.device(kid: kid) {
            return try existingOutcome(existing, user: request.user)
        }

        let hasActive = try storage.hasActiveDevice(user: request.user)
        var status: DeviceStatus = hasActive ? .pending : .active
        if let code = request.enrollmentCode {
            guard try enrollmentCodes.consume(code, user: request.user) else {
                throw ServiceError(.accessDenied, "the enrollment code is not valid for this user")
            }
            status = .active
        } else if !hasActive && settings.enrollment == .code {
            throw ServiceError(.accessDenied, "an enrollment code is required to register a first device")
        }

        let time = now()
        let device = DeviceRecord(
            kid: kid, user: request.user, name: request.name, publicKeyPEM: key.pemRepresentation, status: status,
            createdAt: time, approvedAt: status == .active ? time : nil)
        guard try storage.insertDevice(device) else {
            // Another request registered the same key in between.
            guard let existing = try storage.device(kid: kid) else {
                throw StorageError(.queryFailed, "a device vanished during registration")
            }
            return try existingOutcome(existing, user: request.user)
        }
        return status == .active ? .active(device) : .pending(device)
    }

    /// The answer for a key that is already registered: idempotent for its user, a conflict
    /// for anyone else, and `expired_token` for a pending registration that timed out (the
    /// client must start over with a new key).
    private func existingOutcome(_ existing: DeviceRecord, user: String) throws(ServiceError) -> RegistrationOutcome {
        guard existing.user == user else {
            throw ServiceError(.keyConflict, "this key is registered to another user")
        }
        if isExpiredPending(existing) {
            throw ServiceError(.expiredToken, "the pending registration of this key expired; register a new key")
        }
        return .existing(existing)
    }
}
