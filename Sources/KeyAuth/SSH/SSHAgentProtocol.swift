import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The part of the ssh-agent protocol (draft-miller-ssh-agent) that `keyauth agent` speaks on
/// its second socket, so that `ssh` and `ssh-add` use the held device key: listing identities
/// and signing with them. Everything else (adding or removing keys, locking, extensions) is
/// answered with `SSH_AGENT_FAILURE`: the agent holds one key, unlocked by keyauth's own door.
///
/// Plain Swift over bytes: the framing reads from a descriptor, the answers are computed from a
/// request's bytes by ``answer(_:identities:sign:)`` without sockets or keys, so that hostile
/// input is testable in isolation.
package enum SSHAgentProtocol {
    /// The largest request read; a longer one is answered with failure and the connection ends
    /// (its bytes are not read, so the stream cannot be resynchronised).
    package static let maximumMessageLength = 256 * 1024

    package static let failure: UInt8 = 5
    package static let requestIdentities: UInt8 = 11
    package static let identitiesAnswer: UInt8 = 12
    package static let signRequest: UInt8 = 13
    package static let signResponse: UInt8 = 14
    /// `SSH_AGENT_RSA_SHA2_256` and `SSH_AGENT_RSA_SHA2_512`, the sign request's flags.
    package static let flagSHA256: UInt32 = 2
    package static let flagSHA512: UInt32 = 4

    /// A key the agent offers: its public key (or certificate) blob and a comment for `ssh-add -l`.
    package struct Identity: Sendable, Equatable {
        package let blob: [UInt8]
        package let comment: String

        package init(blob: [UInt8], comment: String) {
            self.blob = blob
            self.comment = comment
        }
    }

    /// The digest of an RSA signature, chosen by the request's flags.
    package enum Digest: Sendable, Equatable {
        case sha256, sha512

        /// The SSH signature algorithm name written before the signature.
        package var algorithmName: String { self == .sha256 ? "rsa-sha2-256" : "rsa-sha2-512" }
    }

    /// What reading one message from a connection gave.
    package enum Read: Equatable {
        /// A message's body: its type byte and payload (possibly empty: then it is malformed).
        case message([UInt8])
        /// The peer closed the connection between messages, or a read timed out.
        case end
        /// The length announced more than ``maximumMessageLength``.
        case tooLong
        /// The stream ended inside a message.
        case truncated
    }

    /// The blob of an RSA public key: string "ssh-rsa", mpint e, mpint n (RFC 4253 section 6.6).
    package static func rsaKeyBlob(_ key: RSAPublicKey) throws(KeyAuthError) -> [UInt8] {
        var writer = SSHWireWriter()
        try writer.string("ssh-rsa")
        try writer.mpint(unsigned: key.exponent)
        try writer.mpint(unsigned: key.modulus)
        return writer.bytes
    }

    /// The blob of the certificate in an OpenSSH `-cert.pub` line, when it certifies `key`:
    /// nil for a line that is not an `ssh-rsa-cert-v01@openssh.com` certificate of that key, so
    /// that a stale certificate of an older key is not offered.
    package static func certificateBlob(line: String, of key: RSAPublicKey) -> [UInt8]? {
        let type = "ssh-rsa-cert-v01@openssh.com"
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        guard fields.count >= 2, fields[0] == type,
            let decoded = Data(base64Encoded: String(fields[1]))
        else { return nil }
        let blob = [UInt8](decoded)
        var reader = SSHWireReader(blob)
        var expected = SSHWireWriter()
        guard (try? expected.mpint(unsigned: key.exponent)) != nil,
            (try? expected.mpint(unsigned: key.modulus)) != nil
        else { return nil }
        var found = SSHWireWriter()
        guard reader.string() == Array(type.utf8), reader.string() != nil,
            let exponent = reader.string(), let modulus = reader.string(),
            (try? found.string(exponent)) != nil, (try? found.string(modulus)) != nil,
            found.bytes == expected.bytes
        else { return nil }
        return blob
    }

    /// When the certificate in `blob` (one ``certificateBlob(line:of:)`` returned) is valid: its
    /// `valid after` and `valid before`, in seconds since 1970 (PROTOCOL.md of OpenSSH); nil
    /// when the blob is cut short. The agent reads it to know when to fetch the next one.
    package static func certificateValidity(_ blob: [UInt8]) -> (after: UInt64, before: UInt64)? {
        var reader = SSHWireReader(blob)
        // Type, nonce, e, n, serial, certificate type, key id, principals.
        guard reader.string() != nil, reader.string() != nil, reader.string() != nil, reader.string() != nil,
            reader.uint64() != nil, reader.uint32() != nil, reader.string() != nil, reader.string() != nil,
            let after = reader.uint64(), let before = reader.uint64()
        else { return nil }
        return (after, before)
    }

    /// The answer to one request's body (type byte and payload), as a message body.
    ///
    /// - Parameters:
    ///   - identities: the agent's keys; nil while it is locked (then every request fails).
    ///   - sign: signs data with the held key and the given digest.
    package static func answer(
        _ body: [UInt8], identities: [Identity]?,
        sign: (Digest, [UInt8]) throws(KeyAuthError) -> [UInt8]
    ) -> [UInt8] {
        var reader = SSHWireReader(body)
        guard let identities, let type = reader.byte() else { return [failure] }
        switch type {
        case requestIdentities:
            guard reader.isAtEnd else { return [failure] }
            var writer = SSHWireWriter()
            writer.byte(identitiesAnswer)
            writer.uint32(UInt32(truncatingIfNeeded: identities.count))
            for identity in identities {
                guard (try? writer.string(identity.blob)) != nil, (try? writer.string(identity.comment)) != nil
                else { return [failure] }
            }
            return writer.bytes
        case signRequest:
            guard let blob = reader.string(), let data = reader.string(), let flags = reader.uint32(),
                reader.isAtEnd, identities.contains(where: { $0.blob == blob }),
                isUserAuthenticationRequest(data, keys: identities.map(\.blob)) || isSSHSignatureData(data)
            else { return [failure] }
            let digest: Digest
            switch flags {
            case flagSHA256: digest = .sha256
            case flagSHA512: digest = .sha512
            // 0 is the legacy "ssh-rsa" signature over SHA-1, which keyauth does not make.
            default: return [failure]
            }
            guard let signature = try? sign(digest, data) else { return [failure] }
            var inner = SSHWireWriter()
            var writer = SSHWireWriter()
            writer.byte(signResponse)
            guard (try? inner.string(digest.algorithmName)) != nil, (try? inner.string(signature)) != nil,
                (try? writer.string(inner.bytes)) != nil
            else { return [failure] }
            return writer.bytes
        default:
            return [failure]
        }
    }

    /// Whether `data` is what an SSH client signs to log in with one of `keys`: a
    /// `SSH_MSG_USERAUTH_REQUEST` for the `publickey` method (RFC 4252 section 7) or OpenSSH's
    /// `publickey-hostbound-v00@openssh.com`, after the session identifier.
    ///
    /// The device key's SSH signature with SHA-256 is the RS256 signature of keyauth's own
    /// assertions, so an agent that signed any data would sign a login or an approval for
    /// whoever reaches its socket, a forwarded one (`ssh -A`) included: it signs only this and
    /// ``isSSHSignatureData(_:)``. Such data starts with the
    /// session identifier's length, and a JWS signing input (`eyJ...`) read as one is tens of
    /// megabytes, so no assertion parses as this.
    ///
    /// The key in the data may be another of the agent's identities than the one the request
    /// names: ssh logging in with the certificate asks for the signature by the plain key.
    package static func isUserAuthenticationRequest(_ data: [UInt8], keys: [[UInt8]]) -> Bool {
        var reader = SSHWireReader(data)
        // The exchange hash: 20 to 64 bytes (SHA-1 to SHA-512).
        guard let session = reader.string(), (20...64).contains(session.count),
            reader.byte() == userAuthenticationRequest, reader.string() != nil,
            reader.string() == Array("ssh-connection".utf8), let method = reader.string(),
            reader.byte() == 1, let algorithm = reader.string(),
            userAuthenticationAlgorithms.contains(where: { Array($0.utf8) == algorithm }),
            let key = reader.string(), keys.contains(key)
        else { return false }
        if method == Array("publickey".utf8) { return reader.isAtEnd }
        // The host-bound method adds the server's host key.
        guard method == Array("publickey-hostbound-v00@openssh.com".utf8), reader.string() != nil else {
            return false
        }
        return reader.isAtEnd
    }

    /// Whether `data` is what `ssh-keygen -Y sign` has an agent sign (OpenSSH's PROTOCOL.sshsig):
    /// the preamble `SSHSIG`, a namespace, a reserved string, the hash's name and the message's
    /// hash. No JWS signing input starts with those six bytes.
    package static func isSSHSignatureData(_ data: [UInt8]) -> Bool {
        let preamble = Array("SSHSIG".utf8)
        guard data.starts(with: preamble) else { return false }
        var reader = SSHWireReader(Array(data.dropFirst(preamble.count)))
        guard let namespace = reader.string(), !namespace.isEmpty, reader.string() != nil,
            let hash = reader.string(), let digest = reader.string(), reader.isAtEnd
        else { return false }
        return (hash == Array("sha256".utf8) && digest.count == 32)
            || (hash == Array("sha512".utf8) && digest.count == 64)
    }

    /// `SSH_MSG_USERAUTH_REQUEST`.
    static let userAuthenticationRequest: UInt8 = 50

    /// The signature algorithms a user authentication request may name for the agent's keys.
    static let userAuthenticationAlgorithms = [
        "rsa-sha2-256", "rsa-sha2-512", "rsa-sha2-256-cert-v01@openssh.com", "rsa-sha2-512-cert-v01@openssh.com",
    ]

    /// Reads one message: a uint32 length, then that many bytes, all of it by `deadline`
    /// (``KeyAgentSocket/readMessage(_:deadline:)`` says why the whole message's).
    package static func readMessage(
        _ descriptor: Int32, deadline: ContinuousClock.Instant = .now + KeyAgentSocket.messageTime
    ) -> Read {
        var prefix = [UInt8](repeating: 0, count: 4)
        switch readExactly(descriptor, into: &prefix, deadline: deadline) {
        case 0: return .end
        case 4: break
        default: return .truncated
        }
        let length = prefix.reduce(0) { ($0 << 8) | Int($1) }
        guard length <= maximumMessageLength else { return .tooLong }
        var body = [UInt8](repeating: 0, count: length)
        return readExactly(descriptor, into: &body, deadline: deadline) == length ? .message(body) : .truncated
    }

    /// Writes one message body with its length; false when the peer has gone (no SIGPIPE).
    package static func writeMessage(_ descriptor: Int32, _ body: [UInt8]) -> Bool {
        var writer = SSHWireWriter()
        guard (try? writer.string(body)) != nil else { return false }
        return DescriptorIO.sendAll(descriptor, bytes: writer.bytes)
    }

    /// Fills `buffer` from `descriptor`; returns how many bytes came before the end or an error.
    private static func readExactly(
        _ descriptor: Int32, into buffer: inout [UInt8], deadline: ContinuousClock.Instant
    ) -> Int {
        var filled = 0
        let count = buffer.count
        while filled < count {
            guard KeyAgentSocket.awaitInput(descriptor, before: deadline) else { break }
            let got = buffer.withUnsafeMutableBytes { raw in
                read(descriptor, raw.baseAddress.map { $0 + filled }, count - filled)
            }
            if got < 0 && errno == EINTR { continue }
            guard got > 0 else { break }
            filled += got
        }
        return filled
    }
}
