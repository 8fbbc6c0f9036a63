import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The ssh-agent messages `keyauth agent` answers, computed from bytes without a socket, and the
/// framing over a real socket pair: hostile input gets `SSH_AGENT_FAILURE`, never a trap.
@Suite("ssh-agent protocol")
struct SSHAgentProtocolTests {
    static let key: RSAPrivateKey? = try? RSAPrivateKey.generate(bits: 2048)
    static let failure: [UInt8] = [SSHAgentProtocol.failure]

    static func identities() throws -> [SSHAgentProtocol.Identity] {
        let key = try #require(Self.key)
        return [.init(blob: try SSHAgentProtocol.rsaKeyBlob(key.publicKey), comment: "keyauth alice")]
    }

    static func signRequest(blob: [UInt8], data: [UInt8], flags: UInt32) throws -> [UInt8] {
        var writer = SSHWireWriter()
        writer.byte(SSHAgentProtocol.signRequest)
        try writer.string(blob)
        try writer.string(data)
        writer.uint32(flags)
        return writer.bytes
    }

    /// What ssh signs to log in with `blob` (RFC 4252 section 7): session identifier, request
    /// type 50, user, service, method, TRUE, algorithm, key, and for the host-bound method the
    /// host key.
    static func userAuthentication(
        blob: [UInt8], session: [UInt8] = Array(repeating: 9, count: 32), type: UInt8 = 50,
        service: String = "ssh-connection", method: String = "publickey", flag: UInt8 = 1,
        algorithm: String = "rsa-sha2-512", hostKey: [UInt8]? = nil
    ) throws -> [UInt8] {
        var writer = SSHWireWriter()
        try writer.string(session)
        writer.byte(type)
        try writer.string("alice")
        try writer.string(service)
        try writer.string(method)
        writer.byte(flag)
        try writer.string(algorithm)
        try writer.string(blob)
        if let hostKey { try writer.string(hostKey) }
        return writer.bytes
    }

    /// Answers with a real key: SHA-256 through ``RSAPrivateKey/signature(for:)``'s twin.
    static func answer(_ body: [UInt8], identities: [SSHAgentProtocol.Identity]?) -> [UInt8] {
        SSHAgentProtocol.answer(body, identities: identities) { (digest, data) throws(KeyAuthError) in
            guard let key = Self.key else { throw KeyAuthError(.cryptoFailed, "no key") }
            return try key.sshSignature(for: data, digest: digest)
        }
    }

    @Test("request identities lists each blob with its comment")
    func identitiesAnswer() throws {
        let identities = try Self.identities()
        let answer = Self.answer([SSHAgentProtocol.requestIdentities], identities: identities)
        var reader = SSHWireReader(answer)
        #expect(reader.byte() == SSHAgentProtocol.identitiesAnswer)
        #expect(reader.uint32() == 1)
        #expect(reader.string() == identities[0].blob)
        #expect(reader.string() == Array("keyauth alice".utf8))
        #expect(reader.isAtEnd)
        var blob = SSHWireReader(identities[0].blob)
        #expect(blob.string() == Array("ssh-rsa".utf8))
    }

    @Test("a SHA-256 sign request gets an rsa-sha2-256 signature that verifies; SHA-512 an rsa-sha2-512 one")
    func signs() throws {
        let identities = try Self.identities()
        let key = try #require(Self.key)
        let data = try Self.userAuthentication(blob: identities[0].blob)
        for (flags, name) in [(UInt32(2), "rsa-sha2-256"), (4, "rsa-sha2-512")] {
            let answer = Self.answer(
                try Self.signRequest(blob: identities[0].blob, data: data, flags: flags), identities: identities)
            var reader = SSHWireReader(answer)
            #expect(reader.byte() == SSHAgentProtocol.signResponse)
            let field = reader.string()
            var signature = SSHWireReader(try #require(field))
            #expect(reader.isAtEnd)
            #expect(signature.string() == Array(name.utf8))
            let inner = signature.string()
            let bytes = try #require(inner)
            #expect(bytes.count == 256)
            #expect(signature.isAtEnd)
            // RS256 verification accepts the SHA-256 one only: the other digest really is another.
            #expect(key.publicKey.isValidSignature(bytes, for: data) == (flags == 2))
        }
    }

    @Test("unknown keys, legacy SHA-1, other requests, a locked agent and every truncation get failure")
    func failures() throws {
        let identities = try Self.identities()
        let data = try Self.userAuthentication(blob: identities[0].blob)
        let valid = try Self.signRequest(blob: identities[0].blob, data: data, flags: 2)
        #expect(Self.answer(valid, identities: identities).first == SSHAgentProtocol.signResponse)
        #expect(Self.answer(valid, identities: nil) == Self.failure)
        #expect(Self.answer([SSHAgentProtocol.requestIdentities], identities: nil) == Self.failure)
        #expect(
            Self.answer(try Self.signRequest(blob: [1, 2, 3], data: data, flags: 2), identities: identities)
                == Self.failure)
        for flags: UInt32 in [0, 1, 6, 8] {
            let request = try Self.signRequest(blob: identities[0].blob, data: data, flags: flags)
            #expect(Self.answer(request, identities: identities) == Self.failure)
        }
        // Add identity, remove all, lock, unlock, extension, an unknown type, nothing at all.
        for body: [UInt8] in [[17, 0, 0, 0, 0], [19], [22, 0, 0, 0, 1, 65], [23], [27, 0, 0, 0, 0], [200], []] {
            #expect(Self.answer(body, identities: identities) == Self.failure)
        }
        for end in 1..<valid.count {
            #expect(Self.answer(Array(valid.prefix(end)), identities: identities) == Self.failure)
        }
        #expect(Self.answer(valid + [0], identities: identities) == Self.failure)
        // A string length past the end, up to UInt32.max, reads as nothing.
        let huge: [UInt8] = [SSHAgentProtocol.signRequest, 0xFF, 0xFF, 0xFF, 0xFF, 1, 2]
        #expect(Self.answer(huge, identities: identities) == Self.failure)
        #expect(Self.answer([SSHAgentProtocol.requestIdentities, 0], identities: identities) == Self.failure)
    }

    @Test("only an SSH login's data is signed: never a keyauth assertion, nor anything else")
    func signsUserAuthenticationOnly() throws {
        let identities = try Self.identities()
        let blob = identities[0].blob
        let signable = [
            try Self.userAuthentication(blob: blob),
            try Self.userAuthentication(blob: blob, session: Array(repeating: 1, count: 20)),
            try Self.userAuthentication(blob: blob, algorithm: "rsa-sha2-256-cert-v01@openssh.com"),
            try Self.userAuthentication(
                blob: blob, method: "publickey-hostbound-v00@openssh.com", hostKey: Array("host key".utf8)),
        ]
        var sshsig = Array("SSHSIG".utf8)
        var fields = SSHWireWriter()
        try fields.string("git")
        try fields.string("")
        try fields.string("sha512")
        try fields.string(Array(repeating: 3, count: 64))
        sshsig += fields.bytes
        for data in signable + [sshsig] {
            let answer = Self.answer(try Self.signRequest(blob: blob, data: data, flags: 2), identities: identities)
            #expect(answer.first == SSHAgentProtocol.signResponse)
        }
        // RS256 over a JWS signing input is what the SHA-256 answer would be: a login or an
        // approval for whoever reaches the socket.
        let assertion = Array("eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhYmMiLCJhcHByb3ZlX2tpZCI6IngifQ".utf8)
        let refused = [
            assertion, Array("session data".utf8), [],
            try Self.userAuthentication(blob: blob, session: Array(repeating: 1, count: 19)),
            try Self.userAuthentication(blob: blob, session: Array(repeating: 1, count: 65)),
            try Self.userAuthentication(blob: blob, type: 51),
            try Self.userAuthentication(blob: blob, service: "ssh-userauth"),
            try Self.userAuthentication(blob: blob, method: "password"),
            try Self.userAuthentication(blob: blob, flag: 0),
            try Self.userAuthentication(blob: blob, algorithm: "ssh-rsa"),
            try Self.userAuthentication(blob: [1, 2, 3]),
            try Self.userAuthentication(blob: blob, hostKey: Array("host key".utf8)),
            try Self.userAuthentication(blob: blob, method: "publickey-hostbound-v00@openssh.com"),
            try Self.userAuthentication(blob: blob) + [0],
            Array(sshsig.dropLast()), sshsig + [0], Array("SSHSIG".utf8),
        ]
        for data in refused {
            for flags: UInt32 in [2, 4] {
                let answer = Self.answer(
                    try Self.signRequest(blob: blob, data: data, flags: flags), identities: identities)
                #expect(answer == Self.failure, "\(String(decoding: data, as: UTF8.self))")
            }
        }
    }

    @Test("a certificate line is offered only when it is an RSA certificate of the same key")
    func certificateLines() throws {
        let key = try #require(Self.key)
        var writer = SSHWireWriter()
        try writer.string("ssh-rsa-cert-v01@openssh.com")
        try writer.string(Array(repeating: 7, count: 32))
        try writer.mpint(unsigned: key.publicKey.exponent)
        try writer.mpint(unsigned: key.publicKey.modulus)
        writer.uint64(1)
        let encoded = Data(writer.bytes).base64EncodedString()
        let line = "ssh-rsa-cert-v01@openssh.com \(encoded) alice"
        #expect(SSHAgentProtocol.certificateBlob(line: line, of: key.publicKey) == writer.bytes)
        let other = try RSAPrivateKey.generate(bits: 2048)
        #expect(SSHAgentProtocol.certificateBlob(line: line, of: other.publicKey) == nil)
        #expect(
            SSHAgentProtocol.certificateBlob(line: "ssh-ed25519-cert-v01@openssh.com \(encoded)", of: key.publicKey)
                == nil)
        #expect(SSHAgentProtocol.certificateBlob(line: "ssh-rsa-cert-v01@openssh.com !!!", of: key.publicKey) == nil)
        #expect(SSHAgentProtocol.certificateBlob(line: "ssh-rsa-cert-v01@openssh.com AAAA", of: key.publicKey) == nil)
    }

    @Test("valid before is read from a certificate blob, and a cut blob gives nil")
    func certificateValidBefore() throws {
        var writer = SSHWireWriter()
        try writer.string("ssh-rsa-cert-v01@openssh.com")
        try writer.string([UInt8](repeating: 7, count: 32))
        try writer.mpint(unsigned: [1, 0, 1])
        try writer.mpint(unsigned: [0xC3, 0x51])
        writer.uint64(42)
        writer.uint32(1)
        try writer.string("keyauth user alice")
        try writer.string([UInt8]())
        writer.uint64(1_700_000_000)
        writer.uint64(1_700_028_800)
        let blob = writer.bytes
        #expect(SSHAgentProtocol.certificateValidity(blob)?.before == 1_700_028_800)
        for length in [0, 10, blob.count - 8, blob.count - 1] {
            #expect(SSHAgentProtocol.certificateValidity(Array(blob.prefix(length))) == nil)
        }
    }

    @Test("framing reads messages until the end, and tells an oversized or cut message apart")
    func framing() throws {
        var ends: [Int32] = [-1, -1]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &ends) == 0)
        defer { close(ends[0]) }
        #expect(SSHAgentProtocol.writeMessage(ends[1], [11]))
        #expect(SSHAgentProtocol.writeMessage(ends[1], [13, 1]))
        close(ends[1])
        #expect(SSHAgentProtocol.readMessage(ends[0]) == .message([11]))
        #expect(SSHAgentProtocol.readMessage(ends[0]) == .message([13, 1]))
        #expect(SSHAgentProtocol.readMessage(ends[0]) == .end)

        for (bytes, expected) in [
            ([0x00, 0x04, 0x00, 0x01] as [UInt8], SSHAgentProtocol.Read.tooLong),
            ([0xFF, 0xFF, 0xFF, 0xFF], .tooLong),
            ([0, 0, 0, 9, 11, 12], .truncated),
            ([0, 0], .truncated),
        ] {
            var pair: [Int32] = [-1, -1]
            try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0)
            #expect(DescriptorIO.writeAll(pair[1], bytes: bytes))
            close(pair[1])
            #expect(SSHAgentProtocol.readMessage(pair[0]) == expected)
            close(pair[0])
        }
    }
}
