internal import CKeyAuthPAM
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Proves presence through the system's PAM stack, the Linux counterpart of Touch ID.
///
/// The administrator decides what the service `keyauth` asks for in `/etc/pam.d/keyauth`: the
/// login password (`pam_unix`), a fingerprint (`pam_fprintd`), a security key (`pam_u2f`). Both
/// `pam_authenticate` and `pam_acct_mgmt` must succeed, so that an expired or locked account
/// cannot use its device key either.
/// - Warning: a stack that contains only `pam_permit.so`, or modules that skip the person (such
///   as `pam_rootok.so` for root), proves nothing; the check is as strong as its configuration.
public struct PAMPresence: PresenceCheck {
    /// The PAM service, the name of the file under `/etc/pam.d`.
    public let serviceName: String

    /// The account that must authenticate: the person running the command, not a name they type.
    public let user: String

    /// A directory read instead of `/etc/pam.d` (with `pam_start_confdir`), so that tests and
    /// packaged apps can run their own stack without touching the system's.
    public let configurationDirectory: String?

    /// Answers the stack's prompts (password, code) and shows its messages.
    public let prompter: any SecretReader

    /// PAM, for the key store that records how a key is protected.
    public var kind: PresenceKind { .pam }

    /// Creates a PAM check.
    ///
    /// - Parameters:
    ///   - serviceName: The PAM service; `keyauth` by default.
    ///   - user: The account; by default the effective user's login name from the password
    ///     database, so that the person cannot authenticate as somebody else.
    ///   - configurationDirectory: Read instead of the system's PAM directories when set.
    ///   - prompter: Answers the conversation; the terminal by default.
    public init(
        serviceName: String = "keyauth",
        user: String? = nil,
        configurationDirectory: String? = nil,
        prompter: any SecretReader = TerminalSecretReader()
    ) {
        self.serviceName = serviceName
        self.user = user ?? Self.currentUserName() ?? ""
        self.configurationDirectory = configurationDirectory
        self.prompter = prompter
    }

    /// Whether a service file exists, so that a missing configuration is reported as such and does
    /// not fall through to PAM's `other` service.
    public func isAvailable() -> Bool {
        serviceFile() != nil
    }

    /// Runs `pam_authenticate` and `pam_acct_mgmt` for ``user`` on a thread of its own.
    ///
    /// Any result other than `PAM_SUCCESS` fails, `PAM_IGNORE` included: a stack whose modules
    /// all abstain has proven nothing.
    /// - Parameter reason: Shown through the prompter before the stack's first prompt.
    /// - Throws: ``KeyAuthError/Code-swift.struct/presenceDenied`` with the `pam_strerror` text in
    ///   a ``NativeError`` when the stack refuses; ``KeyAuthError/Code-swift.struct/presenceUnavailable``
    ///   when the service is not configured, the user is unknown, or PAM cannot start;
    ///   ``KeyAuthError/Code-swift.struct/invalidArgument`` for a service name that is a path;
    ///   the prompter's error when it could not ask (no terminal, cancelled).
    public func verifyPresence(reason: String) async throws(KeyAuthError) {
        guard Self.isValidServiceName(serviceName) else {
            throw KeyAuthError(.invalidArgument, "The PAM service name \"\(serviceName)\" is not a plain name.")
        }
        guard !user.isEmpty else {
            throw KeyAuthError(.presenceUnavailable, "The current user has no entry in the password database.")
        }
        guard serviceFile() != nil else {
            let place = configurationDirectory ?? "/etc/pam.d"
            // keyauth's own service is what a build from source lacks: say where its file is.
            let source =
                serviceName == "keyauth" && configurationDirectory == nil
                ? " (keyauth's package installs it; in the sources it is packaging/etc/pam.d/keyauth)" : ""
            throw KeyAuthError(
                .presenceUnavailable,
                "the PAM service \"\(serviceName)\" is not configured: there is no \(place)/\(serviceName)\(source)")
        }
        if !reason.isEmpty {
            prompter.display(reason, isError: false)
        }
        let check = self
        try await BlockingThread.run { check.authenticate() }
    }

    /// The blocking PAM transaction.
    private func authenticate() -> Result<Void, KeyAuthError> {
        let conversation = PAMConversation(prompter: prompter)
        return withExtendedLifetime(conversation) {
            var callbacks = pam_conv(
                conv: pamConversation,
                appdata_ptr: Unmanaged.passUnretained(conversation).toOpaque()
            )
            let started: Result<PAMTransaction, KeyAuthError> = PAMTransaction.start(
                service: serviceName, user: user, configurationDirectory: configurationDirectory,
                conversation: &callbacks)
            let transaction: PAMTransaction
            switch started {
            case .success(let value): transaction = value
            case .failure(let error): return .failure(error)
            }
            defer { transaction.end() }
            let flags = Int32(PAM_DISALLOW_NULL_AUTHTOK)
            transaction.status = pam_authenticate(transaction.handle, flags)
            guard transaction.status == PAM_SUCCESS else {
                return .failure(denied(transaction, step: "authentication", conversation: conversation))
            }
            transaction.status = pam_acct_mgmt(transaction.handle, flags)
            guard transaction.status == PAM_SUCCESS else {
                return .failure(denied(transaction, step: "the account check", conversation: conversation))
            }
            return .success(())
        }
    }

    private func denied(_ transaction: PAMTransaction, step: String, conversation: PAMConversation) -> KeyAuthError {
        // The prompter's own error (no terminal, cancelled) says more than PAM's PAM_CONV_ERR.
        if let failure = conversation.failure {
            return failure
        }
        let native = transaction.nativeError()
        return KeyAuthError(
            .presenceDenied,
            "PAM service \"\(serviceName)\" refused \(step) for \(user): \(native.text).",
            underlying: native
        )
    }

    /// The service file PAM would read, or nil when none exists.
    func serviceFile() -> String? {
        guard Self.isValidServiceName(serviceName) else { return nil }
        // Linux-PAM lowercases service names before it looks for the file.
        let name = String(decoding: serviceName.utf8.map { (65...90).contains($0) ? $0 + 32 : $0 }, as: UTF8.self)
        let directories = configurationDirectory.map { [$0] } ?? ["/etc/pam.d", "/usr/lib/pam.d"]
        for directory in directories {
            let path = directory.hasSuffix("/") ? directory + name : "\(directory)/\(name)"
            var info = stat()
            if stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG {
                return path
            }
        }
        return nil
    }

    static func isValidServiceName(_ name: String) -> Bool {
        !name.isEmpty && name != "." && name != ".." && !name.contains("/") && !name.utf8.contains(0)
    }

    /// The effective user's login name, read with the reentrant `getpwuid_r`.
    static func currentUserName() -> String? {
        var entry = passwd()
        var found: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16384)
        let status = getpwuid_r(geteuid(), &entry, &buffer, buffer.count, &found)
        guard status == 0, found != nil, let name = entry.pw_name else { return nil }
        return String(cString: name)
    }
}
