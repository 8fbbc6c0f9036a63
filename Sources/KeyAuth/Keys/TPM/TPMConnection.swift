import Foundation

/// Which TPM keyauth talks to: a connection string in the TPM software stack's TCTI syntax.
///
/// The default is the kernel's resource manager, `device:/dev/tpmrm0`, which lets several
/// processes share the TPM and flushes what a crashed process left loaded. Tests point
/// `KEYAUTH_TPM_TCTI` at a software TPM (`swtpm:host=127.0.0.1,port=2321`).
///
/// - Warning: a TCTI name may be the path of a shared library that the TPM stack loads, so the
///   string has the same power as `LD_PRELOAD`. Take it only from the user's own environment or
///   configuration, never from a file or a peer that another user controls.
public struct TPMConnection: Sendable, Hashable, CustomStringConvertible {
    /// The environment variable that selects the TPM.
    public static let environmentVariable = "KEYAUTH_TPM_TCTI"
    /// The kernel resource manager.
    public static let defaultTCTI = "device:/dev/tpmrm0"

    /// The TCTI string, passed unchanged to the TPM stack.
    public let tcti: String

    /// - Throws: `.invalidArgument` for an empty string or one with a NUL or line break, which
    ///   the stack would silently cut or replace with its own default chain of TPMs to try.
    public init(tcti: String) throws(KeyAuthError) {
        guard !tcti.isEmpty, !tcti.contains(where: { $0 == "\0" || $0.isNewline }), tcti.utf8.count <= 1024 else {
            throw KeyAuthError(.invalidArgument, "not a TPM connection string (TCTI): \(tcti.debugDescription)")
        }
        self.tcti = tcti
    }

    /// The kernel resource manager (``defaultTCTI``).
    public static var kernelResourceManager: TPMConnection {
        TPMConnection(unchecked: defaultTCTI)
    }

    private init(unchecked tcti: String) {
        self.tcti = tcti
    }

    /// The TPM that `KEYAUTH_TPM_TCTI` names, or the kernel resource manager when it is unset or
    /// empty.
    ///
    /// - Throws: `.invalidArgument` when the variable holds something that is not a TCTI string;
    ///   falling back to the real TPM there would surprise whoever set it.
    ///
    /// `TPM2OPENSSL_TCTI`, which OpenSSL's tpm2 provider reads on its own, is deliberately not
    /// consulted: keyauth hands the provider its own choice (the internal `TPMProvider`), so the
    /// connection used for keys and the one used for ``TPMInfo`` are always the same.
    public static func fromEnvironment(
        _ environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws(KeyAuthError) -> TPMConnection {
        guard let value = environment[environmentVariable], !value.isEmpty else { return kernelResourceManager }
        return try TPMConnection(tcti: value)
    }

    public var description: String { tcti }
}
