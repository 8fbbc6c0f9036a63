import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

/// The TPM's endorsement key certificates, read from a software TPM that `swtpm_setup`
/// manufactured with certificates from a local CA: the start of key attestation.
@Suite("TPM endorsement certificates", .timeLimit(.minutes(10)))
struct TPMEndorsementCertificateTests {
    @Test("a manufactured TPM gives its certificates, which chain to the CA and name this TPM's endorsement key")
    func certificatesOfManufacturedTPM() throws {
        let tpm = try SoftwareTPM(endorsementCertificates: true)
        defer { withExtendedLifetime(tpm) {} }
        let root = try #require(tpm.endorsementRootCertificatePath)
        let intermediate = try #require(tpm.endorsementIntermediateCertificatePath)
        let certificates = try tpm.connection.endorsementCertificates()
        // swtpm_setup stores an RSA-2048 certificate (low range) and a NIST P-384 one (high range).
        #expect(certificates.map(\.nvIndex) == [0x01C0_0002, 0x01C0_0016])

        let scratch = TemporaryDirectory()
        defer { scratch.remove() }
        for certificate in certificates {
            let name = scratch.path + "/ek-\(String(certificate.nvIndex, radix: 16))"
            try Data(certificate.der).write(to: URL(fileURLWithPath: name + ".der"))
            let converted = try ExternalCommand.run([
                "openssl", "x509", "-inform", "DER", "-in", name + ".der", "-out", name + ".pem",
            ])
            #expect(converted.status == 0, "\(converted.errorOutput)")
            let verified = try ExternalCommand.run([
                "openssl", "verify", "-CAfile", root, "-untrusted", intermediate, name + ".pem",
            ])
            #expect(verified.status == 0, "\(verified.output) \(verified.errorOutput)")
            #expect(verified.output == name + ".pem: OK\n")
        }

        // The RSA certificate is for the endorsement key this TPM derives from its seed.
        let rsa = try #require(certificates.first { $0.nvIndex == 0x01C0_0002 })
        let ek = scratch.path + "/ek.pub.pem"
        let created = try ExternalCommand.run([
            "tpm2_createek", "-T", tpm.tcti, "-c", "-", "-G", "rsa", "-u", ek, "-f", "pem",
        ])
        try #require(created.status == 0, "\(created.errorOutput)")
        try Data(rsa.der).write(to: URL(fileURLWithPath: scratch.path + "/rsa.der"))
        let certified = try ExternalCommand.run([
            "openssl", "x509", "-inform", "DER", "-in", scratch.path + "/rsa.der", "-noout", "-pubkey",
        ])
        #expect(certified.status == 0, "\(certified.errorOutput)")
        #expect(certified.output == (try String(contentsOfFile: ek, encoding: .utf8)))
    }

    @Test("a credential made for the certified endorsement key and the attestation key is recovered only there")
    func credentialActivation() throws {
        let tpm = try SoftwareTPM(endorsementCertificates: true)
        let other = try SoftwareTPM()
        defer { withExtendedLifetime((tpm, other)) {} }
        let connection = try tpm.connection
        let scratch = TemporaryDirectory()
        defer { scratch.remove() }

        // The endorsement key derived here is the one the manufacturer's certificate names.
        let certificate = try #require(try connection.endorsementCertificates().first { $0.nvIndex == 0x01C0_0002 })
        try Data(certificate.der).write(to: URL(fileURLWithPath: scratch.path + "/ek.der"))
        let certified = try ExternalCommand.run([
            "openssl", "x509", "-inform", "DER", "-in", scratch.path + "/ek.der", "-noout", "-pubkey",
        ])
        let endorsementKey = try connection.endorsementKey()
        #expect(certified.output == endorsementKey.pemRepresentation)

        let key = try TPMKey.generate(bits: 2048, on: connection)
        let certification = try key.certification(nonce: [1, 2, 3], on: connection)
        /// A credential from tpm2-tools' software TPM2_MakeCredential, as a verifier would make one.
        func makeCredential(for name: [UInt8], secret: [UInt8]) throws -> (blob: [UInt8], secret: [UInt8]) {
            try Data(endorsementKey.pemRepresentation.utf8).write(to: URL(fileURLWithPath: scratch.path + "/ek.pem"))
            try Data(secret).write(to: URL(fileURLWithPath: scratch.path + "/secret"))
            let made = try ExternalCommand.run([
                "tpm2_makecredential", "-T", "none", "-G", "rsa", "-u", scratch.path + "/ek.pem", "-s",
                scratch.path + "/secret", "-n", name.map { String(format: "%02x", $0) }.joined(), "-o",
                scratch.path + "/credential",
            ])
            try #require(made.status == 0, "\(made.errorOutput)")
            // A 4-byte magic and a 4-byte version, then TPM2B_ID_OBJECT and TPM2B_ENCRYPTED_SECRET.
            var file = Array(try Data(contentsOf: URL(fileURLWithPath: scratch.path + "/credential")))[8...]
            func sized() throws -> [UInt8] {
                try #require(file.count >= 2)
                let size = Int(file[file.startIndex]) << 8 | Int(file[file.startIndex + 1])
                try #require(file.count >= 2 + size)
                defer { file = file.dropFirst(2 + size) }
                return Array(file.dropFirst(2).prefix(size))
            }
            return (try sized(), try sized())
        }

        let secret = Array("a server's one-time challenge".utf8)
        let credential = try makeCredential(for: certification.attestationKeyName, secret: secret)
        #expect(try connection.activateCredential(credential.blob, encryptedSecret: credential.secret) == secret)

        // keyauth's own TPM2_MakeCredential, as a server will run it, makes what the TPM opens.
        let challenge = Array(0..<32).map { UInt8($0) }
        let made = try TPMCredential.make(
            secret: challenge, for: certification.attestationKeyName, endorsementKey: endorsementKey)
        #expect(made.encryptedSecret.count == 256)
        #expect(
            try connection.activateCredential(made.credentialBlob, encryptedSecret: made.encryptedSecret) == challenge)
        var tampered = made.credentialBlob
        tampered[tampered.count - 1] ^= 1
        let altered = try #require(throws: KeyAuthError.self) {
            try connection.activateCredential(tampered, encryptedSecret: made.encryptedSecret)
        }
        #expect(altered.code == .keyCorrupt)
        let forOtherName = try TPMCredential.make(secret: challenge, for: key.tpmName, endorsementKey: endorsementKey)
        #expect(
            (try? connection.activateCredential(
                forOtherName.credentialBlob, encryptedSecret: forOtherName.encryptedSecret))
                == nil)

        let attestationKeyName = try certification.attestationKeyName
        for (badSecret, badName) in [
            ([UInt8](), attestationKeyName), (challenge + [0], attestationKeyName),
            (challenge, Array(attestationKeyName.dropLast())),
        ] {
            let refused = try #require(throws: KeyAuthError.self) {
                try TPMCredential.make(secret: badSecret, for: badName, endorsementKey: endorsementKey)
            }
            #expect(refused.code == .invalidArgument)
        }

        // Another TPM cannot open it, and neither can this one for a key other than its attestation key.
        let elsewhere = try #require(throws: KeyAuthError.self) {
            try other.connection.activateCredential(credential.blob, encryptedSecret: credential.secret)
        }
        // swtpm (libtpms) may answer a secret encrypted to another key by going into failure mode,
        // which the stack reports like a TPM that is gone; either way nothing is recovered.
        #expect([.keyCorrupt, .tpmUnavailable].contains(elsewhere.code), "\(elsewhere.message)")
        let forDeviceKey = try makeCredential(for: key.tpmName, secret: secret)
        let wrongKey = try #require(throws: KeyAuthError.self) {
            try connection.activateCredential(forDeviceKey.blob, encryptedSecret: forDeviceKey.secret)
        }
        #expect(wrongKey.code == .keyCorrupt)
    }

    @Test("a certificate stored with padding after it is read without it; one for another key is not sent")
    func paddedAndForeignCertificates() throws {
        let tpm = try SoftwareTPM(endorsementCertificates: true)
        defer { withExtendedLifetime(tpm) {} }
        let connection = try tpm.connection
        let original = try #require(try connection.endorsementCertificates().first { $0.nvIndex == 0x01C0_0002 })
        let scratch = TemporaryDirectory()
        defer { scratch.remove() }
        /// Stores `contents` in the RSA certificate's index as a maker does: an index of exactly
        /// that size, defined and written with the platform's authorization.
        func store(_ contents: [UInt8]) throws {
            let file = scratch.path + "/nv"
            try Data(contents).write(to: URL(fileURLWithPath: file))
            for command in [
                ["tpm2_nvundefine", "-T", tpm.tcti, "-C", "p", "0x1c00002"],
                [
                    "tpm2_nvdefine", "-T", tpm.tcti, "-C", "p", "-s", String(contents.count), "-a",
                    "ppwrite|ppread|ownerread|authread|no_da|platformcreate", "0x1c00002",
                ],
                ["tpm2_nvwrite", "-T", tpm.tcti, "-C", "p", "-i", file, "0x1c00002"],
            ] {
                let result = try ExternalCommand.run(command)
                try #require(result.status == 0, "\(command[0]): \(result.errorOutput)")
            }
        }

        // As an ST33 stores it: the certificate, then 0xFF to the end of an index of 1,600 bytes.
        let indexSize = max(1600, original.der.count + 100)
        try store(original.der + [UInt8](repeating: 0xFF, count: indexSize - original.der.count))
        let read = try #require(try connection.endorsementCertificates().first { $0.nvIndex == 0x01C0_0002 })
        #expect(read.der == original.der)
        let key = try TPMKey.generate(bits: 2048, on: connection)
        #expect(try key.attestation(nonce: [1], on: connection).endorsementCertificates == [original.der])

        // A certificate for another key than the EK derived with the default template (the TPM's
        // maker used a template of its own) is left out: the key is attested, unverified.
        let made = try ExternalCommand.run([
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", scratch.path + "/other.key",
            "-subj", "/CN=another key", "-days", "1", "-outform", "DER", "-out", scratch.path + "/other.der",
        ])
        try #require(made.status == 0, "\(made.errorOutput)")
        let foreign = Array(try Data(contentsOf: URL(fileURLWithPath: scratch.path + "/other.der")))
        try store(foreign)
        #expect(try connection.endorsementCertificates().first?.der == foreign)
        let attestation = try key.attestation(nonce: [1], on: connection)
        #expect(attestation.endorsementCertificates.isEmpty)
        #expect(attestation.endorsementKey == (try connection.endorsementKey()))
    }

    @Test("only a run of 0x00 or of 0xFF after a whole DER SEQUENCE is cut as padding")
    func paddingRules() {
        let short: [UInt8] = [0x30, 0x03, 1, 2, 3]
        let long: [UInt8] = [0x30, 0x82, 0x01, 0x00] + [UInt8](repeating: 7, count: 256)
        #expect(TPMEndorsementCertificate.withoutPadding(short + [0xFF, 0xFF]) == short)
        #expect(TPMEndorsementCertificate.withoutPadding(short + [0x00]) == short)
        #expect(TPMEndorsementCertificate.withoutPadding(long + [UInt8](repeating: 0xFF, count: 600)) == long)
        #expect(TPMEndorsementCertificate.withoutPadding(short) == short)
        for unchanged: [UInt8] in [
            short + [0xFF, 0x00], short + [0x01], long.dropLast() + [0xFF], [0x31, 0x01, 0, 0xFF], [0x30],
            [0x30, 0x84, 0, 0, 0, 1, 0, 0xFF], [0x30, 0x80, 0, 0], [],
        ] {
            #expect(TPMEndorsementCertificate.withoutPadding(unchanged) == unchanged, "\(unchanged)")
        }
    }

    @Test("a TPM without certificates gives none, and no TPM is tpm_unavailable naming the TCTI")
    func noCertificates() throws {
        let tpm = try SoftwareTPM()
        defer { withExtendedLifetime(tpm) {} }
        #expect(try tpm.connection.endorsementCertificates().isEmpty)
        tpm.stop()
        let error = try #require(throws: KeyAuthError.self) { try tpm.connection.endorsementCertificates() }
        #expect(error.code == .tpmUnavailable)
        #expect(error.message.contains(tpm.tcti))
    }
}
