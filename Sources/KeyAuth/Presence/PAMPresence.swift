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
            throw KeyAuthError(
                .presenceUnavailable, "The PAM service \"\(serviceName)\" is not configured in \(place).")
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

/// One PAM transaction: the owner of a `pam_handle_t`.
///
/// ``end()`` runs `pam_end`; the caller defers it so that the handle is released at a visible
/// point, before the conversation context it points to, and `deinit` calls it again as a
/// backstop (a second call does nothing).
private final class PAMTransaction {
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

/// The context of the conversation function: who answers, and why they could not.
final class PAMConversation {
    let prompter: any SecretReader
    /// The prompter's error, kept because PAM reduces it to `PAM_CONV_ERR`.
    var failure: KeyAuthError?

    init(prompter: any SecretReader) {
        self.prompter = prompter
    }

    /// Asks the prompter, blocking this thread (never a thread of the cooperative pool: PAM runs
    /// on its own thread) until the async reader answers.
    func ask(_ prompt: String, echo: Bool) -> SecretBytes? {
        let box = AnswerBox()
        let semaphore = DispatchSemaphore(value: 0)
        let prompter = self.prompter
        Task {
            do throws(KeyAuthError) {
                box.result = .success(try await prompter.readLine(prompt: prompt, echo: echo))
            } catch {
                box.result = .failure(error)
            }
            semaphore.signal()
        }
        semaphore.wait()
        switch box.result {
        case .success(let answer):
            return answer
        case .failure(let error):
            failure = error
            return nil
        case nil:
            return nil
        }
    }
}

@available(*, unavailable)
extension PAMConversation: Sendable {}

/// Carries the answer from the task to the waiting PAM thread; the semaphore orders the accesses.
private final class AnswerBox: @unchecked Sendable {
    var result: Result<SecretBytes, KeyAuthError>?
}

/// The message styles of a PAM conversation, for callers outside this file (tests).
enum PAMMessageStyle: Sendable {
    case promptEchoOff, promptEchoOn, errorMessage, textInfo

    var rawValue: Int32 {
        switch self {
        case .promptEchoOff: Int32(PAM_PROMPT_ECHO_OFF)
        case .promptEchoOn: Int32(PAM_PROMPT_ECHO_ON)
        case .errorMessage: Int32(PAM_ERROR_MSG)
        case .textInfo: Int32(PAM_TEXT_INFO)
        }
    }
}

/// The C type of `pam_conv.conv`, spelled out so that the tests' caller goes through it as libpam does.
private typealias PAMConversationFunction =
    @convention(c) (
        Int32,
        UnsafeMutablePointer<UnsafePointer<pam_message>?>?,
        UnsafeMutablePointer<UnsafeMutablePointer<pam_response>?>?,
        UnsafeMutableRawPointer?
    ) -> Int32

/// The conversation function given to PAM.
///
/// A global function, not a closure: libpam calls it on the PAM thread, and a closure written in
/// `main.swift` would be main-actor isolated and trap there. Replies are `calloc`ed and their
/// strings `malloc`ed because libpam frees both; on failure nothing is returned and what was
/// allocated is wiped and freed here.
private func pamConversation(
    count: Int32,
    messages: UnsafeMutablePointer<UnsafePointer<pam_message>?>?,
    responses: UnsafeMutablePointer<UnsafeMutablePointer<pam_response>?>?,
    context: UnsafeMutableRawPointer?
) -> Int32 {
    guard let responses else { return PAM_CONV_ERR }
    responses.pointee = nil
    guard count > 0, count <= PAM_MAX_NUM_MSG, let messages, let context else { return PAM_CONV_ERR }
    let conversation = Unmanaged<PAMConversation>.fromOpaque(context).takeUnretainedValue()
    let total = Int(count)
    guard let memory = calloc(total, MemoryLayout<pam_response>.stride) else { return PAM_BUF_ERR }
    let replies = memory.bindMemory(to: pam_response.self, capacity: total)
    for index in 0..<total {
        guard let message = messages[index] else {
            freeReplies(replies, count: total)
            return PAM_CONV_ERR
        }
        let text = message.pointee.msg.map { String(cString: $0) } ?? ""
        switch message.pointee.msg_style {
        case Int32(PAM_PROMPT_ECHO_OFF), Int32(PAM_PROMPT_ECHO_ON):
            let echo = message.pointee.msg_style == Int32(PAM_PROMPT_ECHO_ON)
            guard let answer = conversation.ask(text, echo: echo) else {
                freeReplies(replies, count: total)
                return PAM_CONV_ERR
            }
            guard let copy = cString(copying: answer) else {
                conversation.failure = KeyAuthError(
                    .invalidArgument, "The answer holds a NUL byte or is longer than PAM accepts.")
                freeReplies(replies, count: total)
                return PAM_CONV_ERR
            }
            replies[index].resp = copy
            replies[index].resp_retcode = 0
        case Int32(PAM_ERROR_MSG):
            conversation.prompter.display(text, isError: true)
        case Int32(PAM_TEXT_INFO):
            conversation.prompter.display(text, isError: false)
        default:
            freeReplies(replies, count: total)
            return PAM_CONV_ERR
        }
    }
    responses.pointee = replies
    return PAM_SUCCESS
}

/// A `malloc`ed, NUL-terminated copy of `secret` for libpam to own, or nil when the secret holds
/// a NUL byte (PAM would silently cut it there) or is longer than PAM accepts.
private func cString(copying secret: SecretBytes) -> UnsafeMutablePointer<CChar>? {
    secret.withUnsafeBytes { bytes in
        guard bytes.count < Int(PAM_MAX_RESP_SIZE), !bytes.contains(0),
            let memory = malloc(bytes.count + 1)
        else { return nil }
        let copy = UnsafeMutableRawBufferPointer(start: memory, count: bytes.count + 1)
        copy.copyMemory(from: bytes)
        copy[bytes.count] = 0
        return memory.bindMemory(to: CChar.self, capacity: bytes.count + 1)
    }
}

/// Wipes and frees replies that are not handed to libpam.
private func freeReplies(_ replies: UnsafeMutablePointer<pam_response>, count: Int) {
    for index in 0..<count {
        if let answer = replies[index].resp {
            OpenSSL.cleanse(UnsafeMutableRawBufferPointer(start: answer, count: strlen(answer)))
            free(answer)
        }
    }
    free(replies)
}

/// Calls the conversation function through its C pointer with fabricated messages, as libpam
/// would, and frees the replies as libpam would; for tests, which cannot import the C module.
///
/// - Returns: The conversation's PAM status and, when it succeeded, one reply per message (nil
///   where the message needs none).
func runPAMConversation(
    _ messages: [(style: PAMMessageStyle, text: String)], prompter: any SecretReader
) async throws(KeyAuthError) -> (status: Int32, replies: [String?], failure: KeyAuthError?) {
    // The conversation blocks its thread while the async prompter answers: not a pool thread.
    try await BlockingThread.run { .success(conversePAM(messages, prompter: prompter)) }
}

private func conversePAM(
    _ messages: [(style: PAMMessageStyle, text: String)], prompter: any SecretReader
) -> (status: Int32, replies: [String?], failure: KeyAuthError?) {
    let conversation = PAMConversation(prompter: prompter)
    let function: PAMConversationFunction = pamConversation
    let texts = messages.map { strdup($0.text) }
    defer { texts.forEach { free($0) } }
    let structures = UnsafeMutablePointer<pam_message>.allocate(capacity: max(messages.count, 1))
    defer { structures.deallocate() }
    for (index, message) in messages.enumerated() {
        (structures + index).initialize(to: pam_message(msg_style: message.style.rawValue, msg: texts[index]))
    }
    var pointers: [UnsafePointer<pam_message>?] = (0..<messages.count).map { UnsafePointer(structures + $0) }
    var replies: UnsafeMutablePointer<pam_response>?
    let status = withExtendedLifetime(conversation) {
        function(
            Int32(messages.count), &pointers, &replies, Unmanaged.passUnretained(conversation).toOpaque())
    }
    var answers: [String?] = []
    if let replies {
        for index in 0..<messages.count {
            answers.append(replies[index].resp.map { String(cString: $0) })
        }
        freeReplies(replies, count: messages.count)
    }
    return (status, answers, conversation.failure)
}
