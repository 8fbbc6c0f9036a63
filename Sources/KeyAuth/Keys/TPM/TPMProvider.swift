internal import CKeyAuthOpenSSL
import Glibc
import Synchronization

/// OpenSSL's `tpm2` provider (Debian's tpm2-openssl), loaded into a library context of its own.
///
/// Never the default context: file keys, the server's keys and every digest keep coming from
/// OpenSSL's default provider, and a TPM that is missing or slow cannot affect them. The context
/// holds only `base` (PEM framing) and `tpm2`, so every RSA key made or decoded in it lives in
/// the TPM, and every signature with such a key is made by the TPM.
///
/// One instance is one open connection to the TPM: the provider connects when it loads and
/// disconnects when the context is freed. A software TPM (swtpm) serves one connection at a time,
/// so nothing else in this process may open a second connection (``TPMInfo``) while one lives.
final class TPMProvider {
    /// The `OSSL_LIB_CTX`.
    let context: OpaquePointer
    /// The TPM it talks to.
    let connection: TPMConnection
    private let base: OpaquePointer
    private let tpm2: OpaquePointer

    /// Loads the provider, which connects to the TPM and reads its capabilities.
    ///
    /// - Throws: `.tpmUnavailable` when the TPM does not answer or the provider is not installed.
    init(connection: TPMConnection) throws(KeyAuthError) {
        TPMStack.quietLogging()
        OpenSSL.clearErrors()
        guard let context = OSSL_LIB_CTX_new() else {
            throw OpenSSL.error(.cryptoFailed, "cannot allocate an OpenSSL library context")
        }
        guard let base = OSSL_PROVIDER_load(context, "base") else {
            OSSL_LIB_CTX_free(context)
            throw OpenSSL.error(.cryptoFailed, "cannot load OpenSSL's base provider")
        }
        guard let tpm2 = Self.withTCTI(connection.tcti, { OSSL_PROVIDER_load(context, "tpm2") }) else {
            let failure = TPMFailure.drain()
            OSSL_PROVIDER_unload(base)
            OSSL_LIB_CTX_free(context)
            if failure.responseCode == nil {
                throw KeyAuthError(
                    .tpmUnavailable,
                    "OpenSSL's tpm2 provider cannot be loaded (is Debian's tpm2-openssl installed?)",
                    underlying: failure.native)
            }
            throw failure.unavailable(on: connection)
        }
        self.context = context
        self.base = base
        self.tpm2 = tpm2
        self.connection = connection
    }

    deinit {
        OSSL_PROVIDER_unload(tpm2)
        OSSL_PROVIDER_unload(base)
        OSSL_LIB_CTX_free(context)
    }

    /// Serialises the moments when `TPM2OPENSSL_TCTI` holds a connection string for a load.
    private static let environmentLock = Mutex(())

    /// Runs `load` with `TPM2OPENSSL_TCTI` set to `tcti`.
    ///
    /// The provider reads its TCTI from that variable when it initialises, and nowhere else that
    /// works: its `tcti` configuration parameter is requested with a null buffer (tpm2-openssl
    /// 1.1.1 to 1.3, `OSSL_provider_init`), so OpenSSL cannot hand the value over and the TPM
    /// stack falls back to its default chain, which ends at any simulator on localhost:2321.
    /// OpenSSL 3.0 has no `OSSL_PROVIDER_load_ex` either. A previous value is put back; when
    /// there was none the variable is left set, because removing and re-adding it reallocates
    /// the environment under any thread that reads it meanwhile, while replacing a value does not.
    private static func withTCTI(_ tcti: String, _ load: () -> OpaquePointer?) -> OpaquePointer? {
        environmentLock.withLock { _ in
            let name = "TPM2OPENSSL_TCTI"
            let previous = getenv(name).map { String(cString: $0) }
            setenv(name, tcti, 1)
            defer { if let previous { setenv(name, previous, 1) } }
            return load()
        }
    }
}

@available(*, unavailable)
extension TPMProvider: Sendable {}

/// Process-wide settings of the TPM software stack.
enum TPMStack {
    /// Silences the stack's own logging, which writes every failed command to stderr (and a
    /// wrong PIN is an expected failure), unless the user set `TSS2_LOG` to debug something.
    ///
    /// Each logging module reads the variable the first time it logs, so it must be set before
    /// the first TPM call and stay set.
    static func quietLogging() {
        _ = quietLoggingOnce
    }

    private static let quietLoggingOnce: Void = {
        setenv("TSS2_LOG", "all+NONE", 0)
    }()
}

/// What OpenSSL's error queue says about a failed TPM operation.
///
/// The provider queues its errors with the TPM stack's response code as the first word of the
/// error's data ("2446 tpm:session(1):the authorization HMAC check failed..."); OpenSSL's own
/// error strings do not include that data, so it is read with `ERR_get_error_all`.
struct TPMFailure {
    /// The first response code found in the queue.
    var responseCode: TPMResponseCode?
    /// The stack's text for that code, or the queue's texts when there is none.
    var text: String
    /// The OpenSSL code of the first queued error.
    var openSSLCode: UInt = 0

    /// Empties the calling thread's error queue.
    static func drain() -> TPMFailure {
        var failure = TPMFailure(responseCode: nil, text: "")
        var texts: [String] = []
        while true {
            var data: UnsafePointer<CChar>? = nil
            var flags: Int32 = 0
            let code = ERR_get_error_all(nil, nil, nil, &data, &flags)
            if code == 0 { break }
            if failure.openSSLCode == 0 { failure.openSSLCode = code }
            let detail = (flags & ERR_TXT_STRING) != 0 ? data.map { String(cString: $0) } ?? "" : ""
            if failure.responseCode == nil, let parsed = parse(detail) {
                failure.responseCode = parsed.code
                failure.text = parsed.text
            }
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buffer, buffer.count)
            let reason = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            texts.append(detail.isEmpty ? reason : "\(reason) (\(detail))")
        }
        if failure.responseCode == nil { failure.text = texts.joined(separator: "; ") }
        return failure
    }

    /// Reads "<decimal code> <text>".
    static func parse(_ detail: String) -> (code: TPMResponseCode, text: String)? {
        guard let space = detail.firstIndex(of: " "), let signed = Int32(detail[..<space]) else { return nil }
        let code = UInt32(bitPattern: signed)
        guard code != 0 else { return nil }
        return (TPMResponseCode(code), String(detail[detail.index(after: space)...]))
    }

    /// The underlying error for ``KeyAuthError``.
    var native: NativeError {
        if let responseCode {
            return NativeError(library: "tss2", code: Int(responseCode.rawValue), text: text)
        }
        return NativeError(library: "openssl", code: Int(openSSLCode), text: text)
    }

    /// The error for a TPM that cannot be reached.
    func unavailable(on connection: TPMConnection) -> KeyAuthError {
        KeyAuthError(
            .tpmUnavailable, "the TPM at \(connection.tcti) is unavailable\(text.isEmpty ? "" : ": \(text)")",
            underlying: native)
    }

    /// The error a caller sees.
    ///
    /// - Parameter operation: a verb for the message ("sign", "create a key").
    func error(doing operation: String, on connection: TPMConnection) -> KeyAuthError {
        let detail = text.isEmpty ? "" : ": \(text)"
        switch responseCode?.meaning {
        case .authorizationFailed:
            return KeyAuthError(.wrongPIN, "wrong PIN", underlying: native)
        case .lockedOut:
            return KeyAuthError(.lockedOut, "the TPM is locked after too many wrong PINs", underlying: native)
        case .unreachable:
            return unavailable(on: connection)
        case .foreignKey:
            return KeyAuthError(
                .keyCorrupt,
                "the TPM at \(connection.tcti) does not accept this key: it was made by another TPM, "
                    + "or this TPM has been cleared since\(detail)",
                underlying: native)
        case .unsupported:
            return KeyAuthError(
                .invalidArgument, "the TPM at \(connection.tcti) cannot \(operation) this way\(detail)",
                underlying: native)
        case .other, nil:
            return KeyAuthError(
                .cryptoFailed, "the TPM at \(connection.tcti) could not \(operation)\(detail)", underlying: native)
        }
    }
}
