extension KeyAuthError.Code {
    /// No TPM answers at the configured connection (no device, a stopped software TPM, a TPM in
    /// failure mode), or OpenSSL's tpm2 provider is not installed. The message names the TCTI.
    public static let tpmUnavailable = KeyAuthError.Code(rawValue: "tpm_unavailable")
}
