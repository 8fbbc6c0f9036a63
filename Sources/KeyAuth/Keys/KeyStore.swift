/// Where a ``KeyPairStore`` makes new device keys: in a file, in a TPM, or in the TPM when one
/// answers and in a file otherwise.
///
/// The app chooses, once, when it builds its store. A key file can be copied by anything that
/// runs as the user, and a PIN-encrypted copy guessed offline; a TPM key cannot leave the TPM that
/// made it, and the TPM itself counts wrong PINs (``TPMKey``). Loading needs no choice: the store
/// sees from its files which kind of key it holds, so an app that switches to `.automatic` keeps
/// logging in with the file keys it made before.
///
/// ```swift
/// let environment = ProcessInfo.processInfo.environment
/// let tpm = try TPMConnection.fromEnvironment(environment)  // KEYAUTH_TPM_TCTI, else /dev/tpmrm0
/// let store = try KeyPairStore.default(appName: "myapp", environment: environment, keyStore: .automatic(tpm))
/// ```
public enum KeyStore: Sendable, Hashable {
    /// A PKCS#8 file, encrypted with the PIN when there is one.
    case file
    /// A key generated in this TPM; only the TPM-wrapped blob is stored. Creating a key fails
    /// with `tpm_unavailable` when the TPM does not answer.
    case tpm(TPMConnection)
    /// The TPM when it answers at the moment a key is created and can make keys (no owner
    /// password: ``TPMInfo/canCreateKeys``), a file otherwise.
    case automatic(TPMConnection)

    /// What a stored key is: the value `keyauth` records as an account's `key_store`.
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        /// A key file.
        case file
        /// A TPM key blob.
        case tpm

        /// The shortest PIN a new key of this kind accepts, in characters.
        ///
        /// A copied key file can be guessed offline at the speed of the attacker's hardware, so
        /// its PIN must be long (``KeyPairStore/minimumPINLength``); a TPM key's PIN is checked
        /// by the TPM alone, which locks out after a few wrong ones, so 4 digits are as good as
        /// a bank card's (``KeyPairStore/minimumTPMPINLength``).
        public var minimumPINLength: Int {
            switch self {
            case .file: KeyPairStore.minimumPINLength
            case .tpm: KeyPairStore.minimumTPMPINLength
            }
        }

        /// The longest PIN a key of this kind takes, in bytes: a TPM's authorization value is
        /// at most a digest long (``TPMKey/maximumPINBytes``); a key file's PIN has no limit.
        public var maximumPINBytes: Int {
            switch self {
            case .file: Int.max
            case .tpm: TPMKey.maximumPINBytes
            }
        }
    }

    /// The TPM this choice names, if any.
    public var tpmConnection: TPMConnection? {
        switch self {
        case .file: nil
        case .tpm(let connection), .automatic(let connection): connection
        }
    }
}
