import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

/// Reads the fields of a `TPMS_ATTEST` (TPM 2.0 Part 2, section 10.12.12) that a verifier checks.
private struct CertifyStatement {
    var magic: UInt32 = 0
    var type: UInt16 = 0
    var qualifiedSigner: [UInt8] = []
    var extraData: [UInt8] = []
    var certifiedName: [UInt8] = []

    init(_ bytes: [UInt8]) throws {
        var reader = bytes[...]
        func take(_ count: Int) throws -> [UInt8] {
            guard reader.count >= count else { throw TestFailure("TPMS_ATTEST is truncated") }
            defer { reader = reader.dropFirst(count) }
            return Array(reader.prefix(count))
        }
        func number(_ count: Int) throws -> UInt64 { try take(count).reduce(0) { $0 << 8 | UInt64($1) } }
        func sized() throws -> [UInt8] { try take(Int(try number(2))) }
        magic = UInt32(try number(4))
        type = UInt16(try number(2))
        qualifiedSigner = try sized()
        extraData = try sized()
        _ = try take(17)  // clockInfo: clock, resetCount, restartCount, safe
        _ = try take(8)  // firmwareVersion
        certifiedName = try sized()
        _ = try sized()  // qualifiedName
        guard reader.isEmpty else { throw TestFailure("TPMS_ATTEST has trailing bytes") }
    }
}

/// `TPM2_Certify` of device keys against a software TPM: each test starts its own TPM.
@Suite("TPM key certification", .timeLimit(.minutes(10)))
struct TPMKeyCertificationTests {
    private let pin = SecretBytes(utf8: "2468")
    private let nonce = Array(0..<32).map { UInt8($0) }

    @Test("the TPM certifies its key: the statement names the key and the nonce, and verifies with stock OpenSSL")
    func certifies() throws {
        let tpm = try SoftwareTPM()
        defer { withExtendedLifetime(tpm) {} }
        let connection = try tpm.connection
        let key = try TPMKey.generate(bits: 2048, pin: pin, on: connection)
        let certification = try key.certification(nonce: nonce, pin: pin, on: connection)

        let statement = try CertifyStatement(certification.certifyInfo)
        #expect(statement.magic == 0xFF54_4347, "TPM_GENERATED_VALUE: the TPM made this statement")
        #expect(statement.type == 0x8017, "TPM_ST_ATTEST_CERTIFY")
        #expect(statement.extraData == nonce)
        #expect(statement.certifiedName == key.tpmName)
        #expect(key.tpmName.count == 34)
        #expect(statement.qualifiedSigner.count == 34, "the attestation key's qualified name")
        #expect(certification.attestationKey.bits == 2048)
        #expect(certification.attestationKey.isValidSignature(certification.signature, for: certification.certifyInfo))
        var tampered = certification.certifyInfo
        tampered[tampered.count - 1] ^= 1
        #expect(!certification.attestationKey.isValidSignature(certification.signature, for: tampered))

        let scratch = TemporaryDirectory()
        defer { scratch.remove() }
        try Data(certification.attestationKey.pemRepresentation.utf8).write(
            to: URL(fileURLWithPath: scratch.path + "/ak.pem"))
        try Data(certification.certifyInfo).write(to: URL(fileURLWithPath: scratch.path + "/info"))
        try Data(certification.signature).write(to: URL(fileURLWithPath: scratch.path + "/signature"))
        let verified = try ExternalCommand.run([
            "openssl", "dgst", "-sha256", "-verify", scratch.path + "/ak.pem", "-signature",
            scratch.path + "/signature",
            scratch.path + "/info",
        ])
        #expect(verified.output == "Verified OK\n", "\(verified.errorOutput)")
        // Nothing stays in the TPM.
        for handles in ["handles-transient", "handles-persistent"] {
            let listed = try ExternalCommand.run(["tpm2_getcap", "-T", tpm.tcti, handles])
            #expect(listed.status == 0, "\(listed.errorOutput)")
            #expect(listed.output.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty, "\(handles)")
        }
    }

    @Test("the attestation key is the same on one TPM every time, and another TPM's is different")
    func attestationKeyIsTheTPMs() throws {
        let tpm = try SoftwareTPM()
        let other = try SoftwareTPM()
        defer { withExtendedLifetime((tpm, other)) {} }
        let key = try TPMKey.generate(bits: 2048, on: try tpm.connection)
        let first = try key.certification(nonce: nonce, on: try tpm.connection)
        let second = try key.certification(nonce: [7], on: try tpm.connection)
        #expect(first.attestationKeyPublicArea == second.attestationKeyPublicArea)
        #expect(try CertifyStatement(second.certifyInfo).extraData == [7])
        let otherKey = try TPMKey.generate(bits: 2048, on: try other.connection)
        let elsewhere = try otherKey.certification(nonce: nonce, on: try other.connection)
        #expect(elsewhere.attestationKey != first.attestationKey)
    }

    @Test("a wrong PIN is refused and counted by the TPM; another TPM's blob and bad nonces are refused")
    func refusals() throws {
        let tpm = try SoftwareTPM()
        let other = try SoftwareTPM()
        defer { withExtendedLifetime((tpm, other)) {} }
        let connection = try tpm.connection
        let key = try TPMKey.generate(bits: 2048, pin: pin, on: connection)

        let wrong = try #require(throws: KeyAuthError.self) {
            try key.certification(nonce: nonce, pin: SecretBytes(utf8: "1357"), on: connection)
        }
        #expect(wrong.code == .wrongPIN)
        #expect(wrong.message == "wrong PIN; the TPM locks out after 2 more wrong PINs")
        #expect(try connection.info().lockoutCounter == 1)
        let noPIN = try #require(throws: KeyAuthError.self) { try key.certification(nonce: nonce, on: connection) }
        #expect(noPIN.code == .wrongPIN)

        let foreign = try #require(throws: KeyAuthError.self) {
            try key.certification(nonce: nonce, pin: pin, on: try other.connection)
        }
        #expect(foreign.code == .keyCorrupt)
        for badNonce in [[], [UInt8](repeating: 1, count: 65)] {
            let refused = try #require(throws: KeyAuthError.self) {
                try key.certification(nonce: badNonce, pin: pin, on: connection)
            }
            #expect(refused.code == .invalidArgument)
        }
        #expect(try connection.info().lockoutCounter == 1, "only the wrong PIN counted")
    }
}
