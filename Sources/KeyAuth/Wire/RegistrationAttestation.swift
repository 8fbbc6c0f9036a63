/// The `attestation` member of a registration (PROTOCOL.md section 4, "Register with TPM
/// attestation"): the TPM's evidence for the key, the server's nonce it was made for, and, in the
/// second request, the secret the TPM recovered from the server's credential challenge.
///
/// Binary fields travel as base64url without padding.
package struct RegistrationAttestation: Sendable, Equatable {
    /// `nonce`: as `POST /v1/attestation-nonces` answered.
    package var nonce: String
    /// `ek_certificates`, `ek_public`, `ak_public`, `key_public`, `certify_info`, `signature`.
    package var evidence: TPMAttestation
    /// `activation_secret`: absent in the first request, which the server answers with a
    /// challenge.
    package var activationSecret: [UInt8]?

    /// The most certificates a chain may have: the EK's and a few intermediates.
    package static let maximumCertificates = 4

    package init(nonce: String, evidence: TPMAttestation, activationSecret: [UInt8]? = nil) {
        self.nonce = nonce
        self.evidence = evidence
        self.activationSecret = activationSecret
    }

    /// The JSON member.
    package var jsonValue: JSONValue {
        var members: [String: JSONValue] = [
            "nonce": .string(nonce),
            "ek_certificates": .array(evidence.endorsementCertificates.map { .string(Base64URL.encode($0)) }),
            "ak_public": .string(Base64URL.encode(evidence.attestationKeyPublicArea)),
            "key_public": .string(Base64URL.encode(evidence.keyPublicArea)),
            "certify_info": .string(Base64URL.encode(evidence.certifyInfo)),
            "signature": .string(Base64URL.encode(evidence.signature)),
        ]
        if let key = evidence.endorsementKey { members["ek_public"] = .string(key.pemRepresentation) }
        if let activationSecret { members["activation_secret"] = .string(Base64URL.encode(activationSecret)) }
        return .object(members)
    }

    /// Reads the member as the server does.
    ///
    /// - Throws: ``WireFormatError`` naming the field that is missing, not base64url, or too long.
    package init(jsonValue: JSONValue) throws(WireFormatError) {
        guard let object = jsonValue.objectValue else { throw WireFormatError("\"attestation\" must be an object") }
        func bytes(_ field: String, limit: Int = 4096) throws(WireFormatError) -> [UInt8] {
            guard let text = object[field]?.stringValue, let value = Base64URL.decode(text), !value.isEmpty,
                value.count <= limit
            else {
                throw WireFormatError("\"attestation.\(field)\" is missing or not base64url of 1 to \(limit) bytes")
            }
            return value
        }
        guard let nonce = object["nonce"]?.stringValue, !nonce.isEmpty, nonce.utf8.count <= 256 else {
            throw WireFormatError("\"attestation.nonce\" is missing or not a string")
        }
        var certificates: [[UInt8]] = []
        switch object["ek_certificates"] {
        case nil, .null?: break
        case .array(let items)? where items.count <= Self.maximumCertificates:
            for item in items {
                guard let text = item.stringValue, let der = Base64URL.decode(text), !der.isEmpty, der.count <= 8192
                else { throw WireFormatError("\"attestation.ek_certificates\" holds something not base64url DER") }
                certificates.append(der)
            }
        default:
            throw WireFormatError(
                "\"attestation.ek_certificates\" must be an array of at most \(Self.maximumCertificates) strings")
        }
        var endorsementKey: RSAPublicKey?
        switch object["ek_public"] {
        case nil, .null?: break
        case .string(let pem)?:
            guard pem.utf8.count <= 4096, !pem.contains("PRIVATE"),
                let key = try? RSAPublicKey(pemRepresentation: Array(pem.utf8))
            else { throw WireFormatError("\"attestation.ek_public\" is not an SPKI PEM RSA public key") }
            endorsementKey = key
        default: throw WireFormatError("\"attestation.ek_public\" must be a string")
        }
        let evidence = TPMAttestation(
            endorsementCertificates: certificates, endorsementKey: endorsementKey,
            attestationKeyPublicArea: try bytes("ak_public", limit: 1024),
            keyPublicArea: try bytes("key_public", limit: 1024),
            certifyInfo: try bytes("certify_info", limit: 1024), signature: try bytes("signature", limit: 1024))
        let activationSecret: [UInt8]? =
            switch object["activation_secret"] {
            case nil, .null?: nil
            default: try bytes("activation_secret", limit: 64)
            }
        self.init(nonce: nonce, evidence: evidence, activationSecret: activationSecret)
    }
}

/// The server's answer to a registration whose attestation checked out but whose credential
/// challenge is not answered yet (202, `"status": "activation_required"`).
package struct ActivationChallenge: Sendable, Equatable {
    /// `kid`: the key being registered.
    package var keyID: String
    /// `credential_blob`, `encrypted_secret`: the `TPM2_MakeCredential` output, base64url.
    package var credential: TPMCredential

    /// The status word that marks this answer.
    package static let status = "activation_required"

    package init(keyID: String, credential: TPMCredential) {
        self.keyID = keyID
        self.credential = credential
    }

    package var jsonValue: JSONValue {
        .object([
            "kid": .string(keyID), "status": .string(Self.status),
            "credential_blob": .string(Base64URL.encode(credential.credentialBlob)),
            "encrypted_secret": .string(Base64URL.encode(credential.encryptedSecret)),
        ])
    }

    /// Reads the answer as a client; nil when it is not a challenge.
    package init?(jsonValue object: JSONValue) {
        guard object["status"]?.stringValue == Self.status, let keyID = object["kid"]?.stringValue,
            let blob = object["credential_blob"]?.stringValue.flatMap(Base64URL.decode),
            let secret = object["encrypted_secret"]?.stringValue.flatMap(Base64URL.decode)
        else { return nil }
        self.init(keyID: keyID, credential: TPMCredential(credentialBlob: blob, encryptedSecret: secret))
    }
}
