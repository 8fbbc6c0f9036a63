/// Why an attestation was refused: which check failed, in words that name the check and never
/// echo the submitted bytes.
package struct TPMAttestationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The check that failed; a closed set, since the server maps each one to the same answer.
    package enum Code: String, Sendable {
        /// A structure does not parse: truncated, oversized, trailing bytes, unknown algorithm.
        case malformed
        /// The statement is not a `TPM2_Certify` made by a TPM (magic, type).
        case notCertify
        /// The statement's qualifying data is not the server's nonce.
        case wrongNonce
        /// The certified name is not the registered key's, or its public key is another.
        case wrongKey
        /// The device key's attributes do not make it a TPM-bound signing key.
        case keyAttributes
        /// The attestation key is not a restricted signing key bound to the TPM.
        case attestationKeyAttributes
        /// The attestation key's signature over the statement does not verify.
        case badSignature
        /// The endorsement key or its certificate is unusable or disagrees with the one sent.
        case endorsementKey
    }

    package let code: Code
    package let message: String

    package init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    package var description: String { message }
}
