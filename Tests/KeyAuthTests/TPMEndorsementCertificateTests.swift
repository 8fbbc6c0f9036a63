import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

/// The TPM's endorsement key certificates, read from a software TPM that `swtpm_setup`
/// manufactured with certificates from a local CA: the start of key attestation.
@Suite("TPM endorsement certificates")
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
