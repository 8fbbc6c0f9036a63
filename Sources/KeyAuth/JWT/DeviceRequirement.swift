/// What a service requires of the device behind an access token, beyond a valid token: that
/// its key is held by a TPM, or by a TPM of a maker the server trusts (PROTOCOL.md section 3).
///
/// Given to ``AccessTokenVerifier`` (`requirement:`), so that a service refuses software-key
/// tokens in one line. It rests on two claims: `device_tier`, which the server vouches for
/// (what the registration's TPM attestation established), and `amr`, the device's own statement
/// of the key it signed with (`hwk` or `swk`, RFC 8176). Both must say hardware: a token that
/// lacks either claim, or states `swk`, is refused, since nothing in it says where the key lives.
///
/// ```swift
/// let verifier = try AccessTokenVerifier(issuer: "https://auth.example.com", requirement: .hardwareKey)
/// ```
public struct DeviceRequirement: Sendable, Hashable, CustomStringConvertible {
    /// The weakest tier that passes, as ``DeviceTier/rank``.
    private let minimumRank: Int
    /// The name in messages.
    private let name: String

    private init(minimumRank: Int, name: String) {
        self.minimumRank = minimumRank
        self.name = name
    }

    /// Every valid token, whatever its device: the default.
    public static let any = DeviceRequirement(minimumRank: 0, name: "any")
    /// A key held by a TPM that answered the server's credential challenge at registration:
    /// `device_tier` `tpm-unverified` or `attested`, and `amr` `hwk`.
    public static let hardwareKey = DeviceRequirement(minimumRank: DeviceTier.tpmUnverified.rank, name: "hardware-key")
    /// A key held by a TPM whose endorsement key certificate chains to a root the server trusts:
    /// `device_tier` `attested`, and `amr` `hwk`.
    public static let attested = DeviceRequirement(minimumRank: DeviceTier.attested.rank, name: "attested")

    /// `any`, `hardware-key` or `attested`.
    public var description: String { name }

    /// Checks a verified token's claims against the requirement.
    ///
    /// - Throws: `.insufficientUserAuthentication` when the token lacks `device_tier` or `amr`,
    ///   names a tier below the requirement, or does not state `hwk`.
    func check(_ claims: AccessTokenClaims) throws(KeyAuthError) {
        guard minimumRank > 0 else { return }
        guard let tier = claims.deviceTier else {
            throw KeyAuthError(
                .insufficientUserAuthentication,
                "the token has no device_tier claim, and this service requires a device of tier \(name)")
        }
        guard DeviceTier(rawValue: tier).rank >= minimumRank else {
            throw KeyAuthError(
                .insufficientUserAuthentication,
                "the token's device has tier \(tier), and this service requires \(name)")
        }
        guard claims.amr.contains(AuthenticationMethod.hardwareKey.rawValue),
            !claims.amr.contains(AuthenticationMethod.softwareKey.rawValue)
        else {
            throw KeyAuthError(
                .insufficientUserAuthentication,
                "the token's amr does not state a hardware key (hwk), and this service requires \(name)")
        }
    }
}
