/// The body of `POST /v1/devices` (PROTOCOL.md section 4, "Register"): who the device belongs to,
/// its name, its public key and a proof of possession.
package struct RegistrationRequest: Sendable, Equatable {
    /// `user`.
    package var user: String
    /// `name`: the device name.
    package var name: String
    /// `public_key`: SPKI PEM.
    package var publicKeyPEM: String
    /// `proof`: an assertion signed by the key being registered.
    package var proof: String
    /// `enrollment_code`, when the person has one; an empty string counts as none.
    package var enrollmentCode: String?
    /// `recovery_code`: one of the user's own recovery codes, when every device is lost; an empty
    /// string counts as none. At most one of the two codes is sent.
    package var recoveryCode: String?

    /// `attestation`: a TPM key's evidence (``RegistrationAttestation``); nil for a key file or
    /// an old client.
    package var attestation: RegistrationAttestation?

    /// `key_protection`: how the key was protected when it was made; nil when the client does
    /// not say (a library application, an old client).
    package var keyProtection: KeyProtection?

    package init(
        user: String, name: String, publicKeyPEM: String, proof: String, enrollmentCode: String? = nil,
        recoveryCode: String? = nil, attestation: RegistrationAttestation? = nil, keyProtection: KeyProtection? = nil
    ) {
        self.user = user
        self.name = name
        self.publicKeyPEM = publicKeyPEM
        self.proof = proof
        self.enrollmentCode = enrollmentCode
        self.recoveryCode = recoveryCode
        self.attestation = attestation
        self.keyProtection = keyProtection
    }

    /// The JSON body, `user`, `name`, `public_key` and `proof` first.
    package var jsonBody: [UInt8] {
        var members: [String: JSONValue] = [
            "user": .string(user), "public_key": .string(publicKeyPEM), "name": .string(name),
            "proof": .string(proof),
        ]
        if let enrollmentCode { members["enrollment_code"] = .string(enrollmentCode) }
        if let recoveryCode { members["recovery_code"] = .string(recoveryCode) }
        if let attestation { members["attestation"] = attestation.jsonValue }
        if let keyProtection { members["key_protection"] = .string(keyProtection.rawValue) }
        return JSONValue.object(members).serializedBytes(leadingKeys: ["user", "name", "public_key", "proof"])
    }

    /// Reads and checks a body as the server does: a JSON object of strings, a user and a device
    /// name that follow ``InputRules``; the name becomes the NFC form ``NameRule`` returns.
    ///
    /// - Throws: ``WireFormatError`` naming the field, never echoing its value.
    package init(json body: [UInt8]) throws(WireFormatError) {
        guard let object = try? JSONValue(parsing: body).objectValue else {
            throw WireFormatError("the body must be a JSON object")
        }
        func string(_ field: String) throws(WireFormatError) -> String {
            guard let value = object[field]?.stringValue else {
                throw WireFormatError("the field \"\(field)\" is missing or not a string")
            }
            return value
        }
        user = try string("user")
        publicKeyPEM = try string("public_key")
        name = try string("name")
        proof = try string("proof")
        enrollmentCode = try Self.optionalCode("enrollment_code", in: object)
        recoveryCode = try Self.optionalCode("recovery_code", in: object)
        if enrollmentCode != nil, recoveryCode != nil {
            throw WireFormatError("send \"enrollment_code\" or \"recovery_code\", not both")
        }
        switch object["attestation"] {
        case nil, .null?: attestation = nil
        case let member?: attestation = try RegistrationAttestation(jsonValue: member)
        }
        switch object["key_protection"] {
        case nil, .null?: keyProtection = nil
        case .string(let value)? where KeyProtection(rawValue: value) != nil:
            keyProtection = KeyProtection(rawValue: value)
        default: throw WireFormatError("the field \"key_protection\" must be \"pin\" or \"none\"")
        }
        guard InputRules.isValidUser(user) else {
            throw WireFormatError("\"user\" must be \(InputRules.userRule)")
        }
        do {
            name = try NameRule.deviceName.normalize(name)
        } catch {
            throw WireFormatError("\"name\" \(error)")
        }
    }

    /// An optional code field: absent, `null` or empty is none.
    private static func optionalCode(_ field: String, in object: [String: JSONValue]) throws(WireFormatError)
        -> String?
    {
        switch object[field] {
        case nil, .null?: return nil
        case .string(let code)?: return code.isEmpty ? nil : code
        default: throw WireFormatError("the field \"\(field)\" must be a string")
        }
    }
}

/// The answer to a registration (201, 202, or 200 for a key already registered): the device as
/// the server recorded it.
package struct RegistrationResponse: Sendable, Equatable {
    /// `kid`: the key's fingerprint as the server computed it.
    package var keyID: String
    /// `user`; nil when a client reads an answer without it.
    package var user: String?
    /// `name`; nil when a client reads an answer without it.
    package var name: String?
    /// `status`: `active`, `pending`, or the state of an existing registration.
    package var status: DeviceStatus
    /// `tier`: what the server knows of where the key lives (``DeviceTier``); nil from a server
    /// older than tiers.
    package var tier: DeviceTier?

    package init(keyID: String, user: String?, name: String?, status: DeviceStatus, tier: DeviceTier? = nil) {
        self.keyID = keyID
        self.user = user
        self.name = name
        self.status = status
        self.tier = tier
    }

    /// `{"kid":...,"name":...,"status":...,"user":...}`.
    package var jsonValue: JSONValue {
        var members: [String: JSONValue] = ["kid": .string(keyID), "status": .string(status.rawValue)]
        if let user { members["user"] = .string(user) }
        if let name { members["name"] = .string(name) }
        if let tier { members["tier"] = .string(tier.rawValue) }
        return .object(members)
    }

    /// Reads an answer as a client: `kid` and `status` are required.
    ///
    /// - Throws: ``WireFormatError`` when either is missing.
    package init(jsonValue object: JSONValue) throws(WireFormatError) {
        guard let keyID = object["kid"]?.stringValue, let status = object["status"]?.stringValue else {
            throw WireFormatError("has no kid or status")
        }
        self.init(
            keyID: keyID, user: object["user"]?.stringValue, name: object["name"]?.stringValue,
            status: DeviceStatus(rawValue: status), tier: object["tier"]?.stringValue.flatMap(DeviceTier.init(name:)))
    }
}
