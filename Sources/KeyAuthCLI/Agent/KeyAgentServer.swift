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
/// served one at a time, each bounded by a socket timeout, and only when `SO_PEERCRED` names the
/// agent's own uid.
final class KeyAgentServer: Sendable {
    private struct Held {
        let secret: SecretBytes
        let expiresAt: Date
    }

    let account: String
    let keyID: String
    let store: KeyPairStore
    let socketPath: String
    private let held = Mutex<Held?>(nil)
    private let stopRequested = Atomic<Bool>(false)
    /// A pipe whose write end wakes the loop from `poll`: a stop request from a signal handler.
    private let wakeRead: Int32
    private let wakeWrite: Int32
    private let errorOutput: @Sendable (String) -> Void

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
    /// - Throws: `.wrongPIN` and the other errors of opening the key (for a TPM key, of one
    ///   signature, which is where a TPM checks its PIN); `.storageFailed` when the memory cannot
    ///   be locked.
    func unlock(pin: SecretBytes?, timeout: TimeInterval) throws(KeyAuthError) {
        let secret: SecretBytes
        if store.storedKind == .tpm {
            let key = try store.loadTPMKey(pin: pin)
            _ = try key.signature(for: Array("keyauth agent: check the PIN".utf8))
            var bytes = pin?.withUnsafeBytes { Array($0) } ?? []
            defer { CryptoPrimitives.wipe(&bytes) }
            secret = try SecretBytes(lockedCopyOf: bytes)
        } else {
            let key = try store.loadPrivateKey(pin: pin)
            var pem = try key.pkcs8PEM()
            defer { CryptoPrimitives.wipe(&pem) }
            secret = try SecretBytes(lockedCopyOf: pem)
        }
        held.withLock { $0 = Held(secret: secret, expiresAt: Date().addingTimeInterval(timeout)) }
    }

    /// Drops what the agent holds; `SecretBytes` zeroes and unlocks its memory.
    func clear() {
        held.withLock { $0 = nil }
    }

    /// Signs with the held key, or fails with `.presenceUnavailable` while locked.
    func sign(_ message: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        clearIfExpired()
        guard let secret = held.withLock({ $0?.secret }) else {
            throw KeyAuthError(.presenceUnavailable, "the agent is locked")
        }
        if store.storedKind == .tpm {
            let pin = secret.count == 0 ? nil : secret.withUnsafeBytes { SecretBytes($0) }
            return try store.loadTPMKey(pin: pin).signature(for: message)
        }
        var pem = secret.withUnsafeBytes { Array($0) }
        defer { CryptoPrimitives.wipe(&pem) }
        return try RSAPrivateKey(pemRepresentation: pem).signature(for: message)
    }

    private func clearIfExpired() {
        held.withLock { held in
            if let expiresAt = held?.expiresAt, expiresAt <= Date() { held = nil }
        }
    }

    /// Asks the loop to end; safe from any thread.
    func requestStop() {
        stopRequested.store(true, ordering: .releasing)
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
    }

    /// Serves `listener` until a `stop` request or ``requestStop()``, then clears the key and
    /// removes the socket.
    func serve(_ listener: Int32) {
        defer {
            clear()
            unlink(socketPath)
            close(listener)
        }
        while !stopRequested.load(ordering: .acquiring) {
            clearIfExpired()
            var descriptors = [
                pollfd(fd: listener, events: Int16(POLLIN), revents: 0),
                pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0),
            ]
            let wait =
                expiresAt.map { Int32(Int(clampingSeconds: $0.timeIntervalSinceNow * 1000 + 1, to: 0...3_600_000)) }
                ?? -1
            let ready = poll(&descriptors, 2, wait)
            guard ready > 0, descriptors[0].revents & Int16(POLLIN) != 0 else { continue }
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else { continue }
            _ = fcntl(connection, F_SETFD, FD_CLOEXEC)
            handle(connection)
            close(connection)
        }
    }

    private func handle(_ connection: Int32) {
        let peer = KeyAgentSocket.peerCredentials(connection)
        guard let peer, peer.uid == KeyAgentSocket.ownUID else {
            let who = peer.map { "uid \($0.uid) in process \($0.pid)" } ?? "an unknown uid"
            errorOutput(
                "keyauth agent: refused a connection from \(who) (only uid \(KeyAgentSocket.ownUID) may use this agent)"
            )
            return
        }
        KeyAgentSocket.setTimeout(connection, seconds: 5)
        guard var body = KeyAgentSocket.readMessage(connection) else { return }
        defer { CryptoPrimitives.wipe(&body) }
        let response: KeyAgentResponse
        if let request = try? JSONDecoder().decode(KeyAgentRequest.self, from: Data(body)) {
            response = answer(request)
        } else {
            response = .failure(KeyAuthError.Code.invalidArgument.rawValue, "not a keyauth agent request")
        }
        guard let encoded = try? JSONEncoder().encode(response) else { return }
        _ = KeyAgentSocket.writeMessage(connection, Array(encoded))
    }

    private func answer(_ request: KeyAgentRequest) -> KeyAgentResponse {
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
            do {
                var response = KeyAgentResponse(ok: true)
                response.signature = Base64URL.encode(try sign(input))
                return response
            } catch {
                return .failure(error.code.rawValue, error.message)
            }
        case "unlock":
            var pinBytes = request.pin.flatMap { Base64URL.decode($0) } ?? []
            defer { CryptoPrimitives.wipe(&pinBytes) }
            do {
                let pin = request.pin == nil ? nil : SecretBytes(pinBytes)
                try unlock(pin: pin, timeout: request.timeout ?? AgentOptions.defaultTimeout)
                var response = KeyAgentResponse(ok: true)
                response.expiresAt = expiresAt?.timeIntervalSince1970
                return response
            } catch {
                return .failure(error.code.rawValue, error.message)
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
