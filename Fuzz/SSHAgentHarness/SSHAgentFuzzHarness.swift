import Foundation
import KeyAuth

#if canImport(Glibc)
    import Glibc
#endif

/// The ssh-agent message parser of `keyauth agent` (``SSHAgentProtocol``, over
/// ``SSHWireReader``) under fuzzing: each input is used three ways, and every answer is compared
/// with what a second reading of draft-miller-ssh-agent, written out here without the parser's
/// helpers, expects.
///
/// 1. As a request body (type byte and payload) to ``SSHAgentProtocol/answer(_:identities:sign:)``
///    with the agent's two identities: the answer must be exactly the expected one (an
///    identities list for a bare `REQUEST_IDENTITIES`, a signature for a well-formed
///    `SIGN_REQUEST` of a held key with flag 2 or 4 whose data is an SSH login's or `SSHSIG`
///    data (``isSignable(_:)``), `SSH_AGENT_FAILURE` for everything else),
///    the key must be asked to sign only then and only the request's data; a locked agent must
///    answer failure to anything.
/// 2. As the byte stream of a connection, through a pipe, to
///    ``SSHAgentProtocol/readMessage(_:deadline:)`` until it ends: the framing (messages, then the end of
///    the stream, a truncated message or an oversized length) must be the expected one.
/// 3. As the certificate in a `-cert.pub` line for ``SSHAgentProtocol/certificateBlob(line:of:)``:
///    a blob it accepts must be the line's, of the right type, naming the held key.
public struct SSHAgentFuzzHarness: Sendable {
    /// The held key: a made-up modulus (nothing is ever verified with it) and e = 65537.
    let key: RSAPublicKey
    /// The agent's identities: the key's certificate (a stand-in blob) and the key.
    package let identities: [SSHAgentProtocol.Identity]

    /// The longest input used as a stream: a pipe holds 64 KiB before a writer would block.
    static let maximumStreamInput = 65_536
    static let certificateType = "ssh-rsa-cert-v01@openssh.com"

    public init() throws {
        let modulus = [0xC3] + (1...63).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
        key = try RSAPublicKey(modulus: modulus, exponent: [1, 0, 1])
        var certificate = SSHWireWriter()
        try certificate.string(Self.certificateType)
        try certificate.string(Array(repeating: 7, count: 32))
        try certificate.mpint(unsigned: key.exponent)
        try certificate.mpint(unsigned: key.modulus)
        certificate.uint64(1)
        identities = [
            SSHAgentProtocol.Identity(blob: certificate.bytes, comment: "alice@keyauth certificate"),
            SSHAgentProtocol.Identity(blob: try SSHAgentProtocol.rsaKeyBlob(key), comment: "alice@keyauth"),
        ]
    }

    /// The broken invariants of `input`, empty when it was handled as expected.
    public func run(_ input: [UInt8]) -> [String] {
        var violations: [String] = []
        checkAnswer(input, into: &violations)
        if input.count <= Self.maximumStreamInput { checkFraming(input, into: &violations) }
        checkCertificate(input, into: &violations)
        return violations
    }

    // MARK: 1. Requests

    /// What one request should get: an answer, and the signature asked for, if any.
    package struct Expected: Equatable {
        /// The answer's body.
        package var answer: [UInt8]
        /// The digest and data the key signs, if it signs.
        package var signed: (SSHAgentProtocol.Digest, [UInt8])?

        package static func == (left: Expected, right: Expected) -> Bool {
            left.answer == right.answer && left.signed?.0 == right.signed?.0 && left.signed?.1 == right.signed?.1
        }
    }

    /// The stand-in signature over `data`: which digest, then the data, so that a signature of
    /// the wrong bytes or digest shows.
    static func signature(_ digest: SSHAgentProtocol.Digest, _ data: [UInt8]) -> [UInt8] {
        [digest == .sha256 ? 0x25 : 0x51] + data
    }

    private func checkAnswer(_ body: [UInt8], into violations: inout [String]) {
        var calls: [(SSHAgentProtocol.Digest, [UInt8])] = []
        let answer = SSHAgentProtocol.answer(body, identities: identities) { digest, data in
            calls.append((digest, data))
            return Self.signature(digest, data)
        }
        let expected = expectedAnswer(body)
        if calls.count > 1 { violations.append("the key was asked to sign \(calls.count) times") }
        let actual = Expected(answer: answer, signed: calls.first)
        if actual != expected {
            violations.append(
                "request \(hex(body.prefix(64))): answered \(hex(answer.prefix(64))), expected "
                    + hex(expected.answer.prefix(64))
                    + (actual.signed?.1 == expected.signed?.1 ? "" : " (signed other data)"))
        }
        let locked = SSHAgentProtocol.answer(body, identities: nil) { _, _ in
            violations.append("a locked agent asked the key to sign")
            return []
        }
        if locked != [SSHAgentProtocol.failure] { violations.append("a locked agent answered \(hex(locked))") }
    }

    /// The answer draft-miller-ssh-agent gives `body`, read byte by byte.
    package func expectedAnswer(_ body: [UInt8]) -> Expected {
        let failure = Expected(answer: [5], signed: nil)
        guard let type = body.first else { return failure }
        switch type {
        case 11:
            guard body.count == 1 else { return failure }
            var answer: [UInt8] = [12] + bigEndian(UInt32(identities.count))
            for identity in identities {
                answer += bigEndian(UInt32(identity.blob.count)) + identity.blob
                let comment = Array(identity.comment.utf8)
                answer += bigEndian(UInt32(comment.count)) + comment
            }
            return Expected(answer: answer, signed: nil)
        case 13:
            var offset = 1
            guard let blob = field(body, &offset), let data = field(body, &offset), body.count - offset == 4
            else { return failure }
            let flags = body[offset...].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            guard identities.contains(where: { $0.blob == blob }), flags == 2 || flags == 4, isSignable(data) else {
                return failure
            }
            let digest: SSHAgentProtocol.Digest = flags == 2 ? .sha256 : .sha512
            let name = Array((flags == 2 ? "rsa-sha2-256" : "rsa-sha2-512").utf8)
            let signature = Self.signature(digest, data)
            let inner = bigEndian(UInt32(name.count)) + name + bigEndian(UInt32(signature.count)) + signature
            return Expected(answer: [14] + bigEndian(UInt32(inner.count)) + inner, signed: (digest, data))
        default:
            return failure
        }
    }

    /// Whether the agent may sign `data`: an SSH `publickey` (or OpenSSH host-bound) user
    /// authentication request naming one of the identities (RFC 4252 section 7), or the
    /// `SSHSIG` data of `ssh-keygen -Y sign`; never anything else, such as a keyauth assertion.
    package func isSignable(_ data: [UInt8]) -> Bool {
        let preamble = Array("SSHSIG".utf8)
        if Array(data.prefix(6)) == preamble {
            var offset = 6
            guard let namespace = field(data, &offset), !namespace.isEmpty, field(data, &offset) != nil,
                let hash = field(data, &offset), let digest = field(data, &offset), offset == data.count
            else { return false }
            return (String(decoding: hash, as: UTF8.self), digest.count) == ("sha256", 32)
                || (String(decoding: hash, as: UTF8.self), digest.count) == ("sha512", 64)
        }
        var offset = 0
        guard let session = field(data, &offset), session.count >= 20, session.count <= 64,
            offset < data.count, data[offset] == 50
        else { return false }
        offset += 1
        guard field(data, &offset) != nil,
            field(data, &offset).map({ String(decoding: $0, as: UTF8.self) }) == "ssh-connection",
            let method = field(data, &offset).map({ String(decoding: $0, as: UTF8.self) }),
            offset < data.count, data[offset] == 1
        else { return false }
        offset += 1
        let algorithms = [
            "rsa-sha2-256", "rsa-sha2-512", "rsa-sha2-256-cert-v01@openssh.com", "rsa-sha2-512-cert-v01@openssh.com",
        ]
        guard let algorithm = field(data, &offset), algorithms.contains(String(decoding: algorithm, as: UTF8.self)),
            let key = field(data, &offset), identities.contains(where: { $0.blob == key })
        else { return false }
        switch method {
        case "publickey": return offset == data.count
        case "publickey-hostbound-v00@openssh.com": return field(data, &offset) != nil && offset == data.count
        default: return false
        }
    }

    /// A `string` at `offset` (advanced past it), or nil when its length runs past the end.
    private func field(_ bytes: [UInt8], _ offset: inout Int) -> [UInt8]? {
        guard bytes.count - offset >= 4 else { return nil }
        let length = bytes[offset..<offset + 4].reduce(0) { $0 << 8 | Int($1) }
        guard bytes.count - offset - 4 >= length else { return nil }
        defer { offset += 4 + length }
        return Array(bytes[offset + 4..<offset + 4 + length])
    }

    // MARK: 2. Framing

    private func checkFraming(_ stream: [UInt8], into violations: inout [String]) {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { return violations.append("pipe: errno \(errno)") }
        let written = stream.withUnsafeBytes { write(ends[1], $0.baseAddress, $0.count) }
        close(ends[1])
        defer { close(ends[0]) }
        guard written == stream.count else { return violations.append("wrote \(written) of \(stream.count) bytes") }
        let expected = expectedFrames(stream)
        var actual: [SSHAgentProtocol.Read] = []
        while actual.count <= expected.count {
            let read = SSHAgentProtocol.readMessage(ends[0])
            actual.append(read)
            guard case .message = read else { break }
        }
        if actual != expected {
            violations.append(
                "framing of \(stream.count) bytes: read \(actual.count) results, expected \(expected.count)")
        }
    }

    /// The messages of `stream`, then how it ends.
    package func expectedFrames(_ stream: [UInt8]) -> [SSHAgentProtocol.Read] {
        var frames: [SSHAgentProtocol.Read] = []
        var offset = 0
        while true {
            let left = stream.count - offset
            if left == 0 { return frames + [.end] }
            if left < 4 { return frames + [.truncated] }
            let length = stream[offset..<offset + 4].reduce(0) { $0 << 8 | Int($1) }
            if length > SSHAgentProtocol.maximumMessageLength { return frames + [.tooLong] }
            if left - 4 < length { return frames + [.truncated] }
            frames.append(.message(Array(stream[offset + 4..<offset + 4 + length])))
            offset += 4 + length
        }
    }

    // MARK: 3. Certificate lines

    private func checkCertificate(_ blob: [UInt8], into violations: inout [String]) {
        let line = "\(Self.certificateType) \(Data(blob).base64EncodedString()) alice@keyauth"
        let accepted = SSHAgentProtocol.certificateBlob(line: line, of: key)
        var offset = 0
        let names =
            field(blob, &offset) == Array(Self.certificateType.utf8) && field(blob, &offset) != nil
            && field(blob, &offset) == [1, 0, 1] && field(blob, &offset) == [0] + key.modulus
        if (accepted != nil) != names || (accepted != nil && accepted != blob) {
            violations.append("certificate \(hex(blob.prefix(64))): accepted \(accepted != nil), expected \(names)")
        }
        // The raw input as a line: whatever it is, an accepted blob names the key.
        if let raw = SSHAgentProtocol.certificateBlob(line: String(decoding: blob, as: UTF8.self), of: key) {
            var at = 0
            if field(raw, &at) != Array(Self.certificateType.utf8) {
                violations.append("a raw line gave a blob of another type")
            }
        }
    }

    // MARK: Seeds

    /// The seeds of `Fuzz/ssh-agent-corpus`: the requests `ssh` and `ssh-add` send, each valid
    /// and in a few broken forms, and a certificate of the held key.
    public func seeds() throws -> [String: [UInt8]] {
        func sign(_ blob: [UInt8], _ data: [UInt8], _ flags: UInt32) -> [UInt8] {
            [13] + bigEndian(UInt32(blob.count)) + blob + bigEndian(UInt32(data.count)) + data + bigEndian(flags)
        }
        func string(_ bytes: [UInt8]) -> [UInt8] { bigEndian(UInt32(bytes.count)) + bytes }
        let certificate = identities[0].blob
        let plain = identities[1].blob
        // What ssh signs to log in with the certificate (by the plain key, as ssh asks).
        let data =
            string(Array(repeating: 0x5A, count: 32)) + [50] + string(Array("alice".utf8))
            + string(Array("ssh-connection".utf8)) + string(Array("publickey-hostbound-v00@openssh.com".utf8)) + [1]
            + string(Array("rsa-sha2-512-cert-v01@openssh.com".utf8)) + string(certificate)
            + string(Array("host key".utf8))
        let sshsig =
            Array("SSHSIG".utf8) + string(Array("git".utf8)) + string([]) + string(Array("sha512".utf8))
            + string(Array(repeating: 7, count: 64))
        let assertion = Array("eyJhbGciOiJSUzI1NiJ9.eyJhcHByb3ZlX2tpZCI6IngifQ".utf8)
        let request = sign(plain, data, 4)
        return [
            "request-identities": [11],
            "request-identities-framed": [0, 0, 0, 1, 11],
            "sign-sha512-key": request,
            "sign-sha256-certificate": sign(certificate, data, 2),
            "sign-sshsig": sign(plain, sshsig, 4),
            "sign-assertion-refused": sign(plain, assertion, 2),
            "sign-sha1-refused": sign(plain, data, 0),
            "sign-unknown-key": sign(Array(plain.dropLast()), data, 4),
            "sign-truncated": Array(request.dropLast(2)),
            "sign-framed-twice": bigEndian(UInt32(request.count)) + request + [0, 0, 0, 1, 11],
            "oversized-length": [0x7F, 0xFF, 0xFF, 0xFF, 11],
            "add-identity-refused": [17, 0, 0, 0, 7] + Array("ssh-rsa".utf8),
            "extension-refused": [27, 0, 0, 0, 9] + Array("query@foo".utf8),
            "certificate": certificate,
        ]
    }

    private func bigEndian(_ value: UInt32) -> [UInt8] {
        [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
    }

    private func hex(_ bytes: some Collection<UInt8>) -> String {
        bytes.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }
            .joined()
    }
}
