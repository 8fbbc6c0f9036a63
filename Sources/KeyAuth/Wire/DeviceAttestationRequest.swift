/// The body of `POST /v1/devices/attestation` (PROTOCOL.md section 4, "Attest a registered
/// device"): a registered TPM device's fresh assertion, which says which device it is and proves
/// it holds the key, and the TPM's evidence for that key, in the form a registration carries it.
///
/// The device is authenticated by the assertion rather than by an access token: a device that
/// the device policy refuses at login gets no token, and it is the one that needs to attest.
package struct DeviceAttestationRequest: Sendable, Equatable {
    /// `assertion`: a device assertion (PROTOCOL.md section 2) signed by the device key.
    package var assertion: String
    /// `attestation`: as in a registration, `activation_secret` only in the second request.
    package var attestation: RegistrationAttestation

    package init(assertion: String, attestation: RegistrationAttestation) {
        self.assertion = assertion
        self.attestation = attestation
    }

    /// The JSON body.
    package var jsonBody: [UInt8] {
        JSONValue.object(["assertion": .string(assertion), "attestation": attestation.jsonValue]).serializedBytes(
            leadingKeys: ["assertion"])
    }

    /// Reads a body as the server does.
    ///
    /// - Throws: ``WireFormatError`` naming the field, never echoing its value.
    package init(json body: [UInt8]) throws(WireFormatError) {
        guard let object = try? JSONValue(parsing: body).objectValue else {
            throw WireFormatError("the body must be a JSON object")
        }
        guard let assertion = object["assertion"]?.stringValue else {
            throw WireFormatError("the field \"assertion\" is missing or not a string")
        }
        guard let member = object["attestation"] else {
            throw WireFormatError("the field \"attestation\" is missing")
        }
        self.init(assertion: assertion, attestation: try RegistrationAttestation(jsonValue: member))
    }
}

/// The answer to an attestation whose TPM answered the challenge (200): the device's tier as
/// the server now records it, the one before, and what this attestation showed.
package struct DeviceAttestationResponse: Sendable, Equatable {
    /// `kid`.
    package var keyID: String
    /// `tier`: as stored now, never lower than ``previousTier``.
    package var tier: DeviceTier
    /// `previous_tier`: as stored before.
    package var previousTier: DeviceTier
    /// `attestation_tier`: what this attestation showed (`attested` or `tpm-unverified`); lower
    /// than ``tier`` when the device had shown more before, which the server keeps.
    package var attestationTier: DeviceTier
    /// `endorsement_problem`: why the endorsement key certificate did not make this attestation
    /// `attested`; absent when it did.
    package var endorsementProblem: String?

    package init(
        keyID: String, tier: DeviceTier, previousTier: DeviceTier, attestationTier: DeviceTier,
        endorsementProblem: String?
    ) {
        self.keyID = keyID
        self.tier = tier
        self.previousTier = previousTier
        self.attestationTier = attestationTier
        self.endorsementProblem = endorsementProblem
    }

    package var jsonValue: JSONValue {
        var members: [String: JSONValue] = [
            "kid": .string(keyID), "tier": .string(tier.rawValue), "previous_tier": .string(previousTier.rawValue),
            "attestation_tier": .string(attestationTier.rawValue),
        ]
        if let endorsementProblem { members["endorsement_problem"] = .string(endorsementProblem) }
        return .object(members)
    }

    /// Reads the answer as a client.
    ///
    /// - Throws: ``WireFormatError`` when a tier or the key ID is missing, or a tier is not a
    ///   tier name (``DeviceTier/init(name:)``).
    package init(jsonValue object: JSONValue) throws(WireFormatError) {
        guard let keyID = object["kid"]?.stringValue, let tier = object["tier"]?.stringValue,
            let previous = object["previous_tier"]?.stringValue, let shown = object["attestation_tier"]?.stringValue
        else { throw WireFormatError("has no kid, tier, previous_tier or attestation_tier") }
        guard let tier = DeviceTier(name: tier), let previous = DeviceTier(name: previous),
            let shown = DeviceTier(name: shown)
        else { throw WireFormatError("has a tier that is not a tier name") }
        self.init(
            keyID: keyID, tier: tier, previousTier: previous, attestationTier: shown,
            endorsementProblem: object["endorsement_problem"]?.stringValue)
    }
}
