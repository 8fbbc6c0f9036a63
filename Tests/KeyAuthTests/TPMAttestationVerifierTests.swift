import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

/// The server's check of a TPM attestation, against attestations a software TPM made: a genuine
/// one passes, and each tampered field is refused by the check that owns it.
@Suite("TPM attestation verifier", .timeLimit(.minutes(10)))
struct TPMAttestationVerifierTests {
    private let nonce = Array(0..<32).map { UInt8($0) }
    /// The real time when asked: the certificates are made during the test, valid from then.
    private var now: Int64 { Int64(Date().timeIntervalSince1970) }

    /// A TPM manufactured with an endorsement key certificate, a key in it, and the key's
    /// attestation for ``nonce``.
    private struct Fixture {
        let tpm: SoftwareTPM
        let key: TPMKey
        let attestation: TPMAttestation
        /// The local CA's root and intermediate, as an operator would configure them.
        let roots: TPMEndorsementRoots
        let rootOnly: TPMEndorsementRoots
        let intermediateDER: [UInt8]

        init(nonce: [UInt8]) throws {
            tpm = try SoftwareTPM(endorsementCertificates: true)
            let connection = try tpm.connection
            key = try TPMKey.generate(bits: 2048, on: connection)
            attestation = try key.attestation(nonce: nonce, on: connection)
            let root = try Data(contentsOf: URL(fileURLWithPath: try #require(tpm.endorsementRootCertificatePath)))
            let intermediate = try Data(
                contentsOf: URL(fileURLWithPath: try #require(tpm.endorsementIntermediateCertificatePath)))
            roots = try TPMEndorsementRoots(pem: Array(root) + Array(intermediate))
            rootOnly = try TPMEndorsementRoots(pem: Array(root))
            intermediateDER = try #require(try TPMEndorsementRoots(pem: Array(intermediate)).certificates.first)
        }
    }

    private func refusal(
        _ attestation: TPMAttestation, key: RSAPublicKey, nonce: [UInt8]? = nil, roots: TPMEndorsementRoots = .none
    ) -> TPMAttestationError.Code? {
        do {
            _ = try TPMAttestationVerifier(roots: roots).verify(
                attestation, key: key, nonce: nonce ?? self.nonce, at: now)
            return nil
        } catch {
            return error.code
        }
    }

    @Test("a genuine attestation verifies; its certificate makes it attested only under the TPM maker's roots")
    func genuine() throws {
        let fixture = try Fixture(nonce: nonce)
        defer { withExtendedLifetime(fixture.tpm) {} }
        let attestation = fixture.attestation
        #expect(attestation.endorsementCertificates.count == 1, "the RSA endorsement key's certificate")
        let endorsementKey = try fixture.tpm.connection.endorsementKey()

        let attested = try TPMAttestationVerifier(roots: fixture.roots).verify(
            attestation, key: fixture.key.publicKey, nonce: nonce, at: now)
        #expect(attested.endorsementProblem == nil)
        #expect(attested.endorsementKey == endorsementKey)
        let certification = try fixture.key.certification(nonce: nonce, on: fixture.tpm.connection)
        #expect(attested.attestationKeyName == (try certification.attestationKeyName))

        // The intermediate may come with the chain instead, as an untrusted certificate.
        var withIntermediate = attestation
        withIntermediate.endorsementCertificates.append(fixture.intermediateDER)
        let chained = try TPMAttestationVerifier(roots: fixture.rootOnly).verify(
            withIntermediate, key: fixture.key.publicKey, nonce: nonce, at: now)
        #expect(chained.endorsementProblem == nil)

        // Without the intermediate the root alone is no path; without roots nothing is.
        let missing = try TPMAttestationVerifier(roots: fixture.rootOnly).verify(
            attestation, key: fixture.key.publicKey, nonce: nonce, at: now)
        #expect(missing.endorsementProblem?.contains("unable to get local issuer certificate") == true)
        let unknown = try TPMAttestationVerifier(roots: .none).verify(
            attestation, key: fixture.key.publicKey, nonce: nonce, at: now)
        #expect(
            unknown.endorsementProblem == "the endorsement key certificate does not verify: no TPM root "
                + "certificate is configured")
        #expect(unknown.endorsementKey == endorsementKey, "the key is still challenged: tpm-unverified")

        // Before the certificate's validity the chain fails with OpenSSL's reason.
        let early = try TPMAttestationVerifier(roots: fixture.roots).verify(
            attestation, key: fixture.key.publicKey, nonce: nonce, at: 0)
        #expect(early.endorsementProblem?.contains("not yet valid") == true)

        // A client of an earlier version sent a certificate with the padding its TPM stored after
        // it: the same certificate; other bytes after it are not.
        for (fill, verifies) in [(UInt8(0xFF), true), (0x00, true), (0x01, false)] {
            var padded = attestation
            padded.endorsementCertificates[0] += [UInt8](repeating: fill, count: 300)
            let outcome = try? TPMAttestationVerifier(roots: fixture.roots).verify(
                padded, key: fixture.key.publicKey, nonce: nonce, at: now)
            #expect((outcome?.endorsementProblem == nil && outcome != nil) == verifies, "fill \(fill)")
        }

        // A TPM without a certificate sends its bare endorsement key.
        var bare = attestation
        bare.endorsementCertificates = []
        let unverified = try TPMAttestationVerifier(roots: fixture.roots).verify(
            bare, key: fixture.key.publicKey, nonce: nonce, at: now)
        #expect(unverified.endorsementProblem == "the TPM sent no endorsement key certificate")
        #expect(unverified.endorsementKey == endorsementKey)
    }

    @Test("a CA of our own that signs this TPM's endorsement key is a trusted root when configured, else unknown")
    func otherAuthority() throws {
        let fixture = try Fixture(nonce: nonce)
        defer { withExtendedLifetime(fixture.tpm) {} }
        let scratch = TemporaryDirectory()
        defer { scratch.remove() }
        let endorsementKey = try fixture.tpm.connection.endorsementKey()
        try Data(endorsementKey.pemRepresentation.utf8).write(to: URL(fileURLWithPath: scratch.path + "/ek.pem"))
        // The marks of an endorsement key certificate (TCG EK Credential Profile), as a maker sets them.
        try Data("keyUsage=critical,keyEncipherment\nextendedKeyUsage=2.23.133.8.1\n".utf8).write(
            to: URL(fileURLWithPath: scratch.path + "/ek.ext"))
        let steps: [[String]] = [
            [
                "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", scratch.path + "/ca.key",
                "-out", scratch.path + "/ca.pem", "-subj", "/CN=Other TPM maker", "-days", "2",
            ],
            [
                "openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", scratch.path + "/throwaway.key",
                "-out", scratch.path + "/ek.csr", "-subj", "/CN=EK",
            ],
            [
                "openssl", "x509", "-req", "-in", scratch.path + "/ek.csr", "-CA", scratch.path + "/ca.pem", "-CAkey",
                scratch.path + "/ca.key", "-force_pubkey", scratch.path + "/ek.pem", "-days", "1", "-outform", "DER",
                "-out", scratch.path + "/ek.der", "-CAcreateserial", "-extfile", scratch.path + "/ek.ext",
            ],
        ]
        for step in steps {
            let result = try ExternalCommand.run(step)
            try #require(result.status == 0, "\(step[1]): \(result.errorOutput)")
        }
        var attestation = fixture.attestation
        attestation.endorsementCertificates = [
            Array(try Data(contentsOf: URL(fileURLWithPath: scratch.path + "/ek.der")))
        ]
        let ownRoot = try TPMEndorsementRoots(
            pem: Array(try Data(contentsOf: URL(fileURLWithPath: scratch.path + "/ca.pem"))))
        let trusted = try TPMAttestationVerifier(roots: ownRoot).verify(
            attestation, key: fixture.key.publicKey, nonce: nonce, at: now)
        #expect(trusted.endorsementProblem == nil)
        let foreign = try TPMAttestationVerifier(roots: fixture.roots).verify(
            attestation, key: fixture.key.publicKey, nonce: nonce, at: now)
        #expect(foreign.endorsementProblem?.contains("unable to get local issuer certificate") == true)
        // Two days on, the certificate has expired.
        let expired = try TPMAttestationVerifier(roots: ownRoot).verify(
            attestation, key: fixture.key.publicKey, nonce: nonce, at: now + 3 * 86_400)
        #expect(expired.endorsementProblem?.contains("certificate has expired") == true)
    }

    @Test(
        "a certificate of the TPM maker's own CA for another purpose than an endorsement key is refused, naming why"
    )
    func wrongPurpose() throws {
        let fixture = try Fixture(nonce: nonce)
        defer { withExtendedLifetime(fixture.tpm) {} }
        let authority = try #require(fixture.tpm.endorsementCA).path
        let scratch = TemporaryDirectory()
        defer { scratch.remove() }
        let endorsementKey = try fixture.tpm.connection.endorsementKey()
        try Data(endorsementKey.pemRepresentation.utf8).write(to: URL(fileURLWithPath: scratch.path + "/ek.pem"))
        let request = try ExternalCommand.run([
            "openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", scratch.path + "/throwaway.key",
            "-out", scratch.path + "/request.csr", "-subj", "/CN=not an EK",
        ])
        try #require(request.status == 0, "\(request.errorOutput)")
        /// A certificate for this TPM's EK, signed by the intermediate that signed its genuine EK
        /// certificate, with `extensions` (an openssl extension file's lines).
        func certificate(_ extensions: [String]) throws -> [UInt8] {
            let file = scratch.path + "/extensions"
            try Data((extensions.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: file))
            let made = try ExternalCommand.run([
                "openssl", "x509", "-req", "-in", scratch.path + "/request.csr", "-CA", authority + "/issuercert.pem",
                "-CAkey", authority + "/signkey.pem", "-force_pubkey", scratch.path + "/ek.pem", "-days", "1",
                "-set_serial", "4242", "-extfile", file, "-outform", "DER", "-out", scratch.path + "/made.der",
            ])
            try #require(made.status == 0, "\(made.errorOutput)")
            return Array(try Data(contentsOf: URL(fileURLWithPath: scratch.path + "/made.der")))
        }
        func verifying(_ extensions: [String]) throws -> Result<VerifiedTPMAttestation, TPMAttestationError> {
            var attestation = fixture.attestation
            attestation.endorsementCertificates = [try certificate(extensions)]
            return Result { () throws(TPMAttestationError) in
                try TPMAttestationVerifier(roots: fixture.roots).verify(
                    attestation, key: fixture.key.publicKey, nonce: nonce, at: now)
            }
        }
        let endorsement = "extendedKeyUsage=2.23.133.8.1"
        let encipherment = "keyUsage=critical,keyEncipherment"
        let notCA = "basicConstraints=critical,CA:FALSE"

        // What swtpm's local CA and the chip makers issue verifies, and so does one without an
        // extended key usage (as Google Cloud's vTPMs have): the chain is the same CA's.
        for accepted in [[endorsement, encipherment, notCA], [encipherment, notCA], [encipherment]] {
            let verified = try verifying(accepted).get()
            #expect(verified.endorsementProblem == nil, "\(accepted)")
            #expect(verified.endorsementKey == endorsementKey)
        }

        // A TLS server's certificate, a CA's, one without key encipherment or key usage: each
        // chains to the trusted root, and each is refused for what it is.
        let refused: [([String], String)] = [
            (
                ["extendedKeyUsage=serverAuth", "keyUsage=critical,digitalSignature,keyEncipherment", notCA],
                "its extended key usage does not include tcg-kp-EKCertificate (2.23.133.8.1)"
            ),
            ([endorsement, "keyUsage=critical,digitalSignature", notCA], "its key usage lacks keyEncipherment"),
            ([endorsement, notCA], "it has no key usage"),
            ([endorsement, encipherment, "basicConstraints=critical,CA:TRUE"], "it is a CA certificate"),
            ([endorsement, "keyUsage=critical,keyEncipherment,keyCertSign"], "its key usage signs certificates"),
        ]
        for (extensions, reason) in refused {
            switch try verifying(extensions) {
            case .success: Issue.record("accepted: \(extensions)")
            case .failure(let error):
                #expect(error.code == .endorsementKey)
                #expect(
                    error.message == "the endorsement key certificate is not one for an endorsement key: \(reason)",
                    "\(extensions)")
            }
        }

        // The genuine certificate that swtpm_setup made carries the marks the check wants.
        let genuine = try #require(fixture.attestation.endorsementCertificates.first)
        try Data(genuine).write(to: URL(fileURLWithPath: scratch.path + "/genuine.der"))
        let shown = try ExternalCommand.run([
            "openssl", "x509", "-inform", "DER", "-in", scratch.path + "/genuine.der", "-noout", "-ext",
            "extendedKeyUsage,keyUsage",
        ])
        #expect(shown.output.contains("2.23.133.8.1"), "\(shown.output)")
        #expect(shown.output.contains("Key Encipherment"), "\(shown.output)")
    }

    @Test("each tampered field, a wrong nonce, a wrong key, another TPM's key and a bad chain are refused")
    func hostile() throws {
        let fixture = try Fixture(nonce: nonce)
        let other = try SoftwareTPM()
        defer { withExtendedLifetime((fixture.tpm, other)) {} }
        let genuine = fixture.attestation
        let key = fixture.key.publicKey
        #expect(refusal(genuine, key: key) == nil)

        // The statement: magic, type, nonce, truncation, trailing bytes.
        func withInfo(_ change: (inout [UInt8]) -> Void) -> TPMAttestation {
            var copy = genuine
            change(&copy.certifyInfo)
            return copy
        }
        #expect(refusal(withInfo { $0[0] ^= 1 }, key: key) == .notCertify)
        #expect(refusal(withInfo { $0[5] = 0x18 }, key: key) == .notCertify)
        #expect(refusal(withInfo { $0.removeLast() }, key: key) == .malformed)
        #expect(refusal(withInfo { $0.append(0) }, key: key) == .malformed)
        #expect(refusal(withInfo { $0 = Array($0.prefix(7)) }, key: key) == .malformed)
        #expect(refusal(genuine, key: key, nonce: Array(nonce.reversed())) == .wrongNonce, "an old nonce")
        #expect(refusal(genuine, key: key, nonce: []) == .wrongNonce)

        // The key: another key registered with this attestation, another key's public area.
        let second = try TPMKey.generate(bits: 2048, on: try fixture.tpm.connection)
        #expect(refusal(genuine, key: second.publicKey) == .wrongKey, "a key file presenting a TPM's attestation")
        var otherArea = genuine
        otherArea.keyPublicArea = second.tpmPublicArea
        #expect(refusal(otherArea, key: second.publicKey) == .wrongKey, "a certify of a different key")

        // The device key's attributes, reached with a statement that names the altered area: its
        // signature would fail later, but the attribute check comes first and must refuse alone.
        let nameOffset = 4 + 2 + 2 + 34 + 2 + nonce.count + 17 + 8 + 2
        for (bit, expected) in [
            (1 << 1, TPMAttestationError.Code.keyAttributes), (1 << 5, .keyAttributes), (1 << 18, .keyAttributes),
        ] as [(UInt32, TPMAttestationError.Code)] {
            var altered = genuine
            altered.keyPublicArea = Self.flipping(attribute: bit, in: genuine.keyPublicArea)
            let name = try TPMPublicArea(altered.keyPublicArea, structure: "test").name()
            altered.certifyInfo.replaceSubrange(nameOffset..<nameOffset + 34, with: name)
            #expect(refusal(altered, key: key) == expected, "attribute bit \(bit)")
        }

        // The attestation key: unrestricted, decrypting, another TPM's, a broken signature.
        for bit in [UInt32(1 << 16), 1 << 17, 1 << 1] {
            var altered = genuine
            altered.attestationKeyPublicArea = Self.flipping(attribute: bit, in: genuine.attestationKeyPublicArea)
            #expect(refusal(altered, key: key) == .attestationKeyAttributes, "attestation key bit \(bit)")
        }
        let foreignKey = try TPMKey.generate(bits: 2048, on: try other.connection)
        let foreign = try foreignKey.attestation(nonce: nonce, on: try other.connection)
        var foreignSigner = genuine
        foreignSigner.attestationKeyPublicArea = foreign.attestationKeyPublicArea
        #expect(refusal(foreignSigner, key: key) == .attestationKeyAttributes, "another TPM's attestation key")
        var foreignSigned = foreignSigner
        foreignSigned.signature = foreign.signature
        #expect(refusal(foreignSigned, key: key) == .attestationKeyAttributes)
        var badSignature = genuine
        badSignature.signature[10] ^= 1
        #expect(refusal(badSignature, key: key) == .badSignature)
        var truncatedArea = genuine
        truncatedArea.attestationKeyPublicArea.removeLast()
        #expect(refusal(truncatedArea, key: key) == .malformed)
        var oversizedArea = genuine
        oversizedArea.keyPublicArea += [0, 0]
        #expect(refusal(oversizedArea, key: key) == .malformed)

        // The endorsement key: another TPM's certificate with this TPM's attestation still
        // verifies here (activation is what fails it), but a bare key disagreeing with the
        // certificate, no key at all, or a certificate that does not parse are refused.
        var mismatched = genuine
        mismatched.endorsementKey = try other.connection.endorsementKey()
        #expect(refusal(mismatched, key: key, roots: fixture.roots) == .endorsementKey)
        var none = genuine
        none.endorsementCertificates = []
        none.endorsementKey = nil
        #expect(refusal(none, key: key) == .endorsementKey)
        var garbage = genuine
        garbage.endorsementCertificates = [Array(genuine.endorsementCertificates[0].dropLast())]
        #expect(refusal(garbage, key: key, roots: fixture.roots) == .endorsementKey)
        var smallKey = genuine
        smallKey.endorsementCertificates = []
        smallKey.endorsementKey = try RSAPrivateKey.generate(bits: 3072).publicKey
        #expect(refusal(smallKey, key: key) == .endorsementKey)
        // A 2048-bit key no TPM makes, which OpenSSL decodes but cannot encrypt to: another
        // exponent, an even modulus.
        let ek = try fixture.tpm.connection.endorsementKey()
        var evenModulus = ek.modulus
        evenModulus[evenModulus.count - 1] &= 0xFE
        for (modulus, exponent) in [(ek.modulus, [0x03] as [UInt8]), (evenModulus, ek.exponent)] {
            var odd = genuine
            odd.endorsementCertificates = []
            odd.endorsementKey = try RSAPublicKey(modulus: modulus, exponent: exponent)
            #expect(refusal(odd, key: key) == .endorsementKey)
        }
        // An EK of Infineon's flawed firmware: its private key can be computed, so an answer to
        // its challenge proves no TPM.
        var roca = genuine
        roca.endorsementCertificates = []
        roca.endorsementKey = try RSAPublicKey(
            modulus: ROCAShapedModulus.make(bits: 2048), exponent: [0x01, 0x00, 0x01])
        #expect(refusal(roca, key: key) == .endorsementKey)
    }

    @Test("every truncation of each structure is refused as malformed, and no changed byte passes or traps")
    func truncationsAndMutations() throws {
        let fixture = try Fixture(nonce: nonce)
        defer { withExtendedLifetime(fixture.tpm) {} }
        let genuine = fixture.attestation
        let key = fixture.key.publicKey
        let fields: [WritableKeyPath<TPMAttestation, [UInt8]>] = [
            \.certifyInfo, \.keyPublicArea, \.attestationKeyPublicArea,
        ]
        for field in fields {
            let bytes = genuine[keyPath: field]
            for length in 0..<bytes.count {
                var truncated = genuine
                truncated[keyPath: field] = Array(bytes.prefix(length))
                let code = refusal(truncated, key: key)
                // A statement cut inside its magic or type is refused before its layout is known.
                #expect(code == .malformed || (field == \.certifyInfo && code == .notCertify), "\(field) \(length)")
            }
            var oversized = genuine
            oversized[keyPath: field] = bytes + [UInt8](repeating: 0xFF, count: 600)
            #expect(refusal(oversized, key: key) == .malformed)
        }
        // Each byte of each structure changed: refused by some check, never accepted, never a trap.
        for field in fields {
            let bytes = genuine[keyPath: field]
            for index in bytes.indices {
                var changed = genuine
                changed[keyPath: field][index] ^= 0x5A
                #expect(refusal(changed, key: key) != nil, "\(field) byte \(index)")
            }
        }
        for index in genuine.signature.indices where index % 7 == 0 {
            var changed = genuine
            changed.signature[index] ^= 0x5A
            #expect(refusal(changed, key: key) == .badSignature)
        }
    }

    /// `area` with one `TPMA_OBJECT` bit flipped (the attributes follow type and nameAlg).
    private static func flipping(attribute bit: UInt32, in area: [UInt8]) -> [UInt8] {
        var copy = area
        for index in 0..<4 { copy[4 + index] ^= UInt8(truncatingIfNeeded: bit >> (8 * (3 - index))) }
        return copy
    }

    @Test("roots are read from PEM text, and text without a certificate is refused")
    func rootsFromPEM() throws {
        #expect(throws: KeyAuthError.self) { try TPMEndorsementRoots(pem: Array("not a certificate".utf8)) }
        #expect(throws: KeyAuthError.self) {
            try TPMEndorsementRoots(pem: Array("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".utf8))
        }
    }
}
