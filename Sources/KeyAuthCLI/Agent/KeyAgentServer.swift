import Foundation
import KeyAuth
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The serving half of `keyauth agent`: holds one account's unlocked key and signs with it for
/// processes of the same user.
///
/// What it holds is a file key's unencrypted PKCS#8 PEM, or a TPM key's PIN, in ``SecretBytes``
/// that are `mlock`ed and zeroed when cleared; a signature opens the key for that one operation.
/// It is cleared when the timeout passes, on `lock`, and when the agent ends. Connections are
/// served only when `SO_PEERCRED` names the agent's own uid, each bounded by a socket timeout.
///
/// It serves two sockets: keyauth's own JSON protocol, one connection at a time from its loop,
/// and the ssh-agent protocol (``SSHAgentProtocol``) for `ssh` and `ssh-add`, which list the
/// device key and its certificate and have it sign SSH logins while the agent is unlocked. An
/// ssh client keeps its connection for its whole authentication, server round trips included,
/// so ssh connections each get a thread of their own (up to ``sshConnectionLimit``): ten `ssh`
/// started at once, as `ansible` or `git` do, are not served one after another. Signatures are
/// made one at a time whoever asks.
final class KeyAgentServer: Sendable {
    private struct Held {
        let secret: SecretBytes
        let expiresAt: Date
        /// When the key is dropped, on a clock that a wall clock set back does not move.
        let deadline: ContinuousClock.Instant
    }

    let account: String
    let keyID: String
    let store: KeyPairStore
    let socketPath: String
    /// The ssh-agent socket beside ``socketPath``.
    var sshSocketPath: String { KeyAgentSocket.sshAgentPath(besides: socketPath) }
    private let held = Mutex<Held?>(nil)
    private let stopRequested = Atomic<Bool>(false)
    /// A pipe whose write end wakes the loop from `poll`: a stop request from a signal handler.
    private let wakeRead: Int32
    private let wakeWrite: Int32
    let errorOutput: @Sendable (String) -> Void
    /// The ssh connections being served on their threads, shut down when the agent ends.
    private let sshConnections = Mutex<Set<Int32>>([])
    /// One signature at a time: a TPM key is used through a provider context that is not safe
    /// to share between threads, and a key file's signature takes a millisecond.
    private let signing = Mutex(())

    init(
        account: String, keyID: String, store: KeyPairStore, socketPath: String,
        errorOutput: @escaping @Sendable (String) -> Void
    ) throws(KeyAuthError) {
        self.account = account
        self.keyID = keyID
        self.store = store
        self.socketPath = socketPath
        self.errorOutput = errorOutput
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { throw KeyAgentSocket.systemError("cannot create the agent's wake-up pipe") }
        for end in ends {
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
            _ = fcntl(end, F_SETFL, O_NONBLOCK)
        }
        wakeRead = ends[0]
        wakeWrite = ends[1]
    }

    deinit {
        close(wakeRead)
        close(wakeWrite)
    }

    /// When what the agent holds is cleared; nil while locked.
    var expiresAt: Date? { held.withLock { $0?.expiresAt } }

    /// Opens the key with `pin` and holds it for `timeout` seconds.
    ///
    /// A PIN for a key file is one counted attempt in the key's attempts file, as a login's is
    /// (``PINAttemptCounter``): any process of the user can send `unlock`, and a socket that
    /// decrypted without counting would let it guess PINs with no delay. A TPM counts its own.
    /// - Throws: `.invalidArgument` for a timeout outside ``AgentOptions/timeoutRange`` (before
    ///   the PIN is tried); `.lockedOut`, `.wrongPIN` and the other errors of opening the key (for
    ///   a TPM key, of one signature, which is where a TPM checks its PIN); `.storageFailed` when
    ///   the memory cannot be locked or the attempts file cannot be used.
    func unlock(pin: SecretBytes?, timeout: TimeInterval) throws(KeyAuthError) {
        // A NaN or an infinite timeout would make the expiry unusable; 1e308 would hold forever.
        guard AgentOptions.timeoutRange.contains(timeout) else {
            throw KeyAuthError(
                .invalidArgument,
                "the unlock timeout must be between \(Int(AgentOptions.timeoutRange.lowerBound)) and "
                    + "\(Int(AgentOptions.timeoutRange.upperBound)) seconds")
        }
        // A key that replaced the agent's (reset, then registered again) is not the one asked for.
        try checkKeyUnchanged()
        let secret: SecretBytes
        if store.storedKind == .tpm {
            try signing.withLock { _ throws(KeyAuthError) in
                let key = try store.loadTPMKey(pin: pin)
                _ = try key.signature(for: Array("keyauth agent: check the PIN".utf8))
            }
            var bytes = pin?.withUnsafeBytes { Array($0) } ?? []
            defer { CryptoPrimitives.wipe(&bytes) }
            secret = try SecretBytes(lockedCopyOf: bytes)
        } else {
            let key: RSAPrivateKey
            if let pin {
                let counter = PINAttemptCounter(attemptsFile: store.pinAttemptsPath)
                key = try counter.counting(warning: { errorOutput($0) }) { () throws(KeyAuthError) in
                    try store.loadPrivateKey(pin: pin)
                }
            } else {
                // Without a PIN only a key file that no PIN protects opens: there is nothing to guess.
                key = try store.loadPrivateKey(pin: nil)
            }
            var pem = try key.pkcs8PEM()
            defer { CryptoPrimitives.wipe(&pem) }
            secret = try SecretBytes(lockedCopyOf: pem)
        }
        let held = Held(
            secret: secret, expiresAt: Date().addingTimeInterval(timeout),
            deadline: .now + .milliseconds(Int64(timeout * 1000)))
        self.held.withLock { $0 = held }
    }

    /// Drops what the agent holds; `SecretBytes` zeroes and unlocks its memory.
    func clear() {
        held.withLock { $0 = nil }
    }

    /// Signs for an ssh-agent request with SHA-256 or SHA-512, a file key here and a TPM key in
    /// its TPM; SHA-256 is also the RS256 of keyauth's own logins.
    ///
    /// The held secret is read once this signature's turn has come, not before: a signature
    /// queued behind others while a `lock`, the timeout or the agent's end cleared the key is
    /// refused, never made with a copy taken earlier.
    func sshSign(_ message: [UInt8], digest: SSHAgentProtocol.Digest) throws(KeyAuthError) -> [UInt8] {
        try signing.withLock { _ throws(KeyAuthError) -> [UInt8] in
            clearIfExpired()
            guard !stopRequested.load(ordering: .acquiring), let secret = held.withLock({ $0?.secret }) else {
                throw KeyAuthError(.presenceUnavailable, "the agent is locked")
            }
            try checkKeyUnchanged()
            if store.storedKind == .tpm {
                let pin = secret.count == 0 ? nil : secret.withUnsafeBytes { SecretBytes($0) }
                do throws(KeyAuthError) {
                    return try store.loadTPMKey(pin: pin).sshSignature(for: message, digest: digest)
                } catch {
                    // After `keyauth pin change`, each signature tried with the PIN held would cost a
                    // try of the TPM's dictionary-attack counter, which every key shares. (A
                    // lockout may come from another key's PINs: this one may still be right.)
                    guard error.code == .wrongPIN else { throw error }
                    clear()
                    throw KeyAuthError(
                        error.code,
                        "the agent's PIN no longer opens the TPM key (was it changed?), so the agent is locked: "
                            + error.message, retryAfter: error.retryAfter)
                }
            }
            var pem = secret.withUnsafeBytes { Array($0) }
            defer { CryptoPrimitives.wipe(&pem) }
            return try RSAPrivateKey(pemRepresentation: pem).sshSignature(for: message, digest: digest)
        }
    }

    /// Clears the held key once its timeout has passed.
    func clearIfExpired() {
        held.withLock { held in
            if let deadline = held?.deadline, deadline <= .now { held = nil }
        }
    }

    /// Asks the loop to end; safe from any thread.
    func requestStop() {
        stopRequested.store(true, ordering: .releasing)
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
    }

    /// The most ssh connections served at once; more wait in the socket's queue until one ends.
    static let sshConnectionLimit = 8

    /// Serves `listener` (and `sshListener`, the ssh-agent socket) until a `stop` request or
    /// ``requestStop()``, then clears the key, removes the sockets and shuts down the ssh
    /// connections still open, so that none is served after the agent has ended.
    func serve(_ listener: Int32, sshListener: Int32? = nil) {
        defer {
            clear()
            unlink(socketPath)
            close(listener)
            if let sshListener {
                unlink(sshSocketPath)
                close(sshListener)
            }
            sshConnections.withLock { connections in
                for connection in connections { shutdown(connection, Int32(SHUT_RDWR)) }
            }
            waitForSSHThreads()
        }
        while !stopRequested.load(ordering: .acquiring) {
            clearIfExpired()
            // At the limit the ssh socket is not watched; a connection's end wakes the loop.
            let sshWatched = sshConnections.withLock { $0.count < Self.sshConnectionLimit } ? sshListener : nil
            var descriptors = [
                pollfd(fd: listener, events: Int16(POLLIN), revents: 0),
                pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0),
                pollfd(fd: sshWatched ?? -1, events: Int16(POLLIN), revents: 0),
            ]
            let deadline = held.withLock { $0?.deadline }
            let wait: Int32 =
                deadline.map { deadline -> Int32 in
                    let left = ContinuousClock.now.duration(to: deadline) / .milliseconds(1)
                    return Int32(Int(clampingSeconds: left + 1, to: 0...3_600_000))
                } ?? -1
            // poll ignores a negative descriptor: without an ssh socket, the third entry waits on nothing.
            let ready = poll(&descriptors, 3, wait)
            guard ready > 0 else { continue }
            if descriptors[1].revents & Int16(POLLIN) != 0 { drainWakeUps() }
            if descriptors[0].revents & Int16(POLLIN) != 0, let connection = acceptOwnUser(listener) {
                handle(connection)
                close(connection)
            }
            if let sshWatched, descriptors[2].revents & Int16(POLLIN) != 0, let connection = acceptOwnUser(sshWatched) {
                serveOnItsThread(connection)
            }
        }
    }

    /// Serves an ssh connection on a thread of its own, which then ends it. Without a thread (at
    /// the process's limit) it is ended at once: ssh goes on without the agent, and the place
    /// and the descriptor are not lost.
    private func serveOnItsThread(_ connection: Int32) {
        sshConnections.withLock { _ = $0.insert(connection) }
        let started = DetachedThread.start(name: "keyauth-agent-ssh") { [self] in
            handleSSH(connection)
            endSSHConnection(connection)
        }
        if !started { endSSHConnection(connection) }
    }

    /// Takes `connection` out of the set, then closes it (in that order, so that the shutdown at
    /// the end never reaches a descriptor number the process has reused), and wakes the loop,
    /// which may have stopped watching the ssh socket at the limit.
    private func endSSHConnection(_ connection: Int32) {
        sshConnections.withLock { _ = $0.remove(connection) }
        close(connection)
        var byte: UInt8 = 0
        _ = write(wakeWrite, &byte, 1)
    }

    /// Waits, 3 s at most, for the ssh threads to end after their connections were shut down:
    /// the process exits after ``serve(_:sshListener:)``, and OpenSSL's exit handlers must not
    /// run under a signature. A thread ends at once then: its read sees the shutdown, and a
    /// signature waiting its turn finds the key cleared.
    private func waitForSSHThreads() {
        var waits = 0
        while waits < 300, !sshConnections.withLock({ $0.isEmpty }) {
            usleep(10_000)
            waits += 1
        }
    }

    /// Empties the wake-up pipe, so that `poll` waits again; a stop is read from its flag.
    private func drainWakeUps() {
        var bytes = [UInt8](repeating: 0, count: 64)
        while read(wakeRead, &bytes, bytes.count) > 0 {}
    }

    /// How long one ssh-agent connection is served, counted from its accept; ssh opens a new
    /// connection when it needs the agent again.
    static let sshConnectionShare: TimeInterval = 10

    /// Serves ssh-agent requests on `connection` until the peer closes it, the agent stops, or it
    /// has had ``sshConnectionShare``; a malformed request gets `SSH_AGENT_FAILURE`, and one that
    /// breaks the framing ends the connection after it.
    ///
    /// The share bounds what a peer that asks every few seconds (a forwarded agent's remote end,
    /// say) holds of the ``sshConnectionLimit`` threads.
    private func handleSSH(_ connection: Int32) {
        let deadline = Date().addingTimeInterval(Self.sshConnectionShare)
        while true {
            switch SSHAgentProtocol.readMessage(connection) {
            case .message(var body):
                defer { CryptoPrimitives.wipe(&body) }
                let answer = SSHAgentProtocol.answer(body, identities: sshIdentities()) {
                    (digest, data) throws(KeyAuthError) in try self.sshSign(data, digest: digest)
                }
                guard SSHAgentProtocol.writeMessage(connection, answer) else { return }
                if stopRequested.load(ordering: .acquiring) || Date() >= deadline { return }
            case .tooLong, .truncated:
                _ = SSHAgentProtocol.writeMessage(connection, [SSHAgentProtocol.failure])
                return
            case .end:
                return
            }
        }
    }

    private func handle(_ connection: Int32) {
        // One deadline for the request and its PIN frame: the connection holds the loop 5 s.
        let deadline = ContinuousClock.now + KeyAgentSocket.messageTime
        guard var body = KeyAgentSocket.readMessage(connection, deadline: deadline) else { return }
        defer { CryptoPrimitives.wipe(&body) }
        let response: KeyAgentResponse
        if let request = try? JSONDecoder().decode(KeyAgentRequest.self, from: Data(body)) {
            if request.op == "unlock", request.pinFrame == true {
                // The PIN's own frame: read into one array, copied once into locked memory, wiped.
                guard var pinBytes = KeyAgentSocket.readMessage(connection, deadline: deadline) else { return }
                defer { CryptoPrimitives.wipe(&pinBytes) }
                response = answer(request, pin: SecretBytes(pinBytes))
            } else {
                response = answer(request)
            }
        } else {
            response = .failure(KeyAuthError.Code.invalidArgument.rawValue, "not a keyauth agent request")
        }
        guard let encoded = try? JSONEncoder().encode(response) else { return }
        _ = KeyAgentSocket.writeMessage(connection, Array(encoded))
    }

    /// The response to one request of keyauth's own protocol; internal so that tests can ask
    /// without a socket. `pin` is what the PIN frame after an `unlock` held.
    func answer(_ request: KeyAgentRequest, pin: SecretBytes? = nil) -> KeyAgentResponse {
        switch request.op {
        case "status":
            clearIfExpired()
            var response = KeyAgentResponse(ok: true)
            response.account = account
            response.keyID = keyID
            let expiry = expiresAt
            response.locked = expiry == nil
            response.expiresAt = expiry?.timeIntervalSince1970
            return response
        case "sign":
            guard request.keyID == nil || request.keyID == keyID else {
                return .failure(KeyAuthError.Code.invalidArgument.rawValue, "this agent holds key \(keyID)")
            }
            guard let input = request.input.flatMap({ Base64URL.decode($0) }) else {
                return .failure(KeyAuthError.Code.invalidArgument.rawValue, "sign needs input, base64url")
            }
            if let refusal = KeyAgentSigningPolicy.refusal(input) {
                return .failure(KeyAuthError.Code.invalidArgument.rawValue, refusal)
            }
            do {
                var response = KeyAgentResponse(ok: true)
                response.signature = Base64URL.encode(try sign(input))
                return response
            } catch {
                return .failure(error)
            }
        case "unlock":
            guard !request.hadInlinePIN else {
                return .failure(
                    KeyAuthError.Code.invalidArgument.rawValue,
                    "this agent takes the PIN in a frame of its own, not in the request's JSON: "
                        + "the keyauth that sent it is older than the agent; nothing was tried")
            }
            guard (request.pinFrame == true) == (pin != nil) else {
                return .failure(KeyAuthError.Code.invalidArgument.rawValue, "unlock: the PIN frame did not arrive")
            }
            do {
                try unlock(pin: pin, timeout: request.timeout ?? AgentOptions.defaultTimeout)
                var response = KeyAgentResponse(ok: true)
                response.expiresAt = expiresAt?.timeIntervalSince1970
                return response
            } catch {
                return .failure(error)
            }
        case "lock":
            clear()
            return KeyAgentResponse(ok: true)
        case "stop":
            stopRequested.store(true, ordering: .releasing)
            return KeyAgentResponse(ok: true)
        default:
            return .failure(KeyAuthError.Code.invalidArgument.rawValue, "unknown op \"\(request.op)\"")
        }
    }
}
