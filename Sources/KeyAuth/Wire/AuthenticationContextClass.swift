/// The authentication context classes (`acr`, OpenID Connect Core section 2) that keyauth-server
/// states in the tokens of a sign-in by approval, and that relying parties ask for with
/// `acr_values` (PROTOCOL.md section 8, "Authentication context"): what the device whose
/// approval signed the user in proved.
///
/// Two come from the device's own statement (`amr`), two from what the server established when
/// the device registered (its tier), which is why a relying party that must not accept a key
/// file asks for ``hardwareKey`` or ``attested`` rather than reading `amr`, which the device
/// states and the server cannot check.
package enum AuthenticationContextClass: String, Sendable, Hashable, CaseIterable {
    /// A device key signed the approval; nothing more is claimed.
    case deviceKey = "urn:keyauth:acr:device-key"
    /// A device key, after the device checked its user (`amr` has `pin` or `user`).
    case deviceKeyAndPresence = "urn:keyauth:acr:device-key+presence"
    /// A key in a TPM that answered the server's credential challenge at registration (tier
    /// `tpm-unverified` or `attested`), stating `hwk`.
    case hardwareKey = "urn:keyauth:acr:hwk"
    /// A key in a TPM whose endorsement key certificate chains to a root the server trusts (tier
    /// `attested`), stating `hwk`.
    case attested = "urn:keyauth:acr:attested"

    /// Whether an approval by a device of `tier` whose statement is `methods` meets this class.
    ///
    /// The TPM classes also need the statement `hwk`: a device that says it signed with a key
    /// file contradicts its registration, and is taken at its word.
    package func isMet(tier: DeviceTier, methods: [String]) -> Bool {
        let hardware = methods.contains(AuthenticationMethod.hardwareKey.rawValue)
        switch self {
        case .deviceKey: return true
        case .deviceKeyAndPresence: return methods.contains { AuthenticationMethod.presenceChecks.contains($0) }
        case .hardwareKey: return hardware && tier.rank >= DeviceTier.tpmUnverified.rank
        case .attested: return hardware && tier.rank >= DeviceTier.attested.rank
        }
    }

    /// Whether a device of `tier` can meet this class with some statement: asked before the
    /// device checks its user, so that nobody types a PIN for an approval that will be refused.
    package func isReachable(by tier: DeviceTier) -> Bool {
        isMet(tier: tier, methods: [AuthenticationMethod.hardwareKey.rawValue, AuthenticationMethod.pin.rawValue])
    }

    /// The class an approval states when its request asked for none of these: the device key,
    /// with or without its presence check (the values keyauth stated before tiers existed).
    package static func stated(for methods: [String]) -> Self {
        methods.contains { AuthenticationMethod.presenceChecks.contains($0) } ? .deviceKeyAndPresence : .deviceKey
    }

    /// What the class needs, in words a user reads on the device that is refused.
    package var requirement: String {
        switch self {
        case .deviceKey: "a device key"
        case .deviceKeyAndPresence: "a device that checks its user (a PIN)"
        case .hardwareKey: "a device whose key is in a TPM (tier tpm-unverified or attested)"
        case .attested: "a device whose key is in a TPM of a maker this server trusts (tier attested)"
        }
    }
}
