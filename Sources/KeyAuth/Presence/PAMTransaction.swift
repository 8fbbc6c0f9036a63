internal import CKeyAuthPAM

/// One PAM transaction: the owner of a `pam_handle_t`.
///
/// ``end()`` runs `pam_end`; the caller defers it so that the handle is released at a visible
/// point, before the conversation context it points to, and `deinit` calls it again as a
/// backstop (a second call does nothing).
final class PAMTransaction {
    let handle: OpaquePointer
    /// The last PAM result, which `pam_end` passes on to the modules' cleanup functions.
    var status: Int32
    private var ended = false

    private init(handle: OpaquePointer) {
        self.handle = handle
        self.status = PAM_SUCCESS
    }

    /// Starts a transaction with `pam_start`, or `pam_start_confdir` when a directory is given.
    static func start(
        service: String, user: String, configurationDirectory: String?, conversation: UnsafePointer<pam_conv>
    ) -> Result<PAMTransaction, KeyAuthError> {
        var handle: OpaquePointer?
        let status: Int32
        if let configurationDirectory {
            status = pam_start_confdir(service, user, conversation, configurationDirectory, &handle)
        } else {
            status = pam_start(service, user, conversation, &handle)
        }
        // A failed pam_start has already freed its handle; only the code is left to report.
        guard status == PAM_SUCCESS, let handle else {
            let native = nativeError(handle: nil, status: status)
            return .failure(
                KeyAuthError(
                    .presenceUnavailable, "PAM could not start the service \"\(service)\": \(native.text).",
                    underlying: native))
        }
        return .success(PAMTransaction(handle: handle))
    }

    /// PAM's code and text for the last result.
    func nativeError() -> NativeError {
        Self.nativeError(handle: handle, status: status)
    }

    private static func nativeError(handle: OpaquePointer?, status: Int32) -> NativeError {
        // Linux-PAM's pam_strerror does not read the handle, so it also serves a failed start.
        let text = pam_strerror(handle, status).map { String(cString: $0) } ?? "PAM error \(status)"
        return NativeError(library: "pam", code: Int(status), text: text)
    }

    /// Ends the transaction with the last result; later calls do nothing.
    func end() {
        guard !ended else { return }
        ended = true
        pam_end(handle, status)
    }

    deinit {
        end()
    }
}

@available(*, unavailable)
extension PAMTransaction: Sendable {}
