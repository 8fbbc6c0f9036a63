/// What the server knows of where a device key lives (PROTOCOL.md section 4, "Register with TPM
/// attestation"): the assurance an operator's policy and a relying party decide on.
///
/// A struct rather than an enum, like ``DeviceStatus``, so that a tier a newer server adds still
/// decodes and prints.
package struct DeviceTier: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    package let rawValue: String
    package init(rawValue: String) { self.rawValue = rawValue }

    /// Reads a tier from a server's answer or a stored file: nil unless `name` has a tier name's
    /// shape (1 to 32 lowercase letters, digits and hyphens). A tier newer than this client still
    /// reads; text a terminal would act on (an escape sequence) never reaches one.
    package init?(name: String) {
        let isNameByte = { (byte: UInt8) in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                || byte == UInt8(ascii: "-")
        }
        guard (1...32).contains(name.utf8.count), name.utf8.allSatisfy(isNameByte) else { return nil }
        self.init(rawValue: name)
    }

    package var description: String { rawValue }

    /// The key is certified by a TPM whose endorsement key certificate chains to a root the
    /// server trusts, and the TPM answered the credential challenge.
    package static let attested = DeviceTier(rawValue: "attested")
    /// The key is certified by a TPM that answered the credential challenge, but whose
    /// endorsement key has no certificate or one of an unknown root: a TPM, of unknown make.
    package static let tpmUnverified = DeviceTier(rawValue: "tpm-unverified")
    /// Registered without attestation: for all the server knows, a key file.
    package static let software = DeviceTier(rawValue: "software")

    /// The tiers from weakest to strongest, for policies that ask for "at least".
    package var rank: Int {
        switch self {
        case .attested: 2
        case .tpmUnverified: 1
        default: 0
        }
    }
}
