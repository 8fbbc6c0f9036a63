import Foundation
import KeyAuth
import KeyAuthBinaryFuzzing
import KeyAuthServerFuzzing
import KeyAuthTestSupport
import Testing

/// The binary-parser fuzz target's seeds and findings (Fuzz/binary-corpus, Fuzz/binary-findings),
/// replayed through its harness (``BinaryParserHarness``) by every test run, and the seeds made
/// again from a real software TPM, which is how they were made.
@Suite("The binary-parser fuzz corpus", .timeLimit(.minutes(5)))
struct BinaryFuzzCorpusTests {
    private static let fuzzDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fuzz").path

    @Test("every seed and saved finding keeps the invariants, and the seeds reach acceptance in every mode")
    func replay() throws {
        var acceptedModes: Set<BinaryParserHarness.Mode> = []
        var attested = false
        let files = try ServerFuzzHarness.inputFiles([
            Self.fuzzDirectory + "/binary-corpus", Self.fuzzDirectory + "/binary-findings",
        ])
        for file in files {
            let outcome = BinaryParserHarness.check(Array(try Data(contentsOf: URL(fileURLWithPath: file))))
            #expect(outcome.violations.isEmpty, "\(file): \(outcome.violations)")
            if outcome.accepted, let mode = outcome.mode { acceptedModes.insert(mode) }
            attested = attested || outcome.attested
        }
        #expect(acceptedModes == Set(BinaryParserHarness.Mode.allCases))
        #expect(attested, "a seed attestation verifies as attested: the fuzzer starts past every check")
    }

    /// The inputs a real swtpm's attestation gives, one per mode, named as the corpus names them.
    static func seeds(from tpm: SoftwareTPM) throws -> [(String, [UInt8])] {
        let connection = try tpm.connection
        let key = try TPMKey.generate(bits: 2048, on: connection)
        let nonce = Array(0..<32).map { UInt8($0) }
        let attestation = try key.attestation(nonce: nonce, on: connection)
        let authority = try #require(tpm.endorsementCA).path
        let root = try TPMEndorsementRoots.load(path: authority + "/swtpm-localca-rootca-cert.pem").certificates
        let intermediate = try TPMEndorsementRoots.load(path: authority + "/issuercert.pem").certificates
        let endorsement = try #require(attestation.endorsementCertificates.first)
        let now = Int64(Date().timeIntervalSince1970)
        return [
            ("swtpm-certify-info", BinaryParserHarness.input(.certifyStatement, attestation.certifyInfo)),
            ("swtpm-key-public", BinaryParserHarness.input(.publicArea, attestation.keyPublicArea)),
            ("swtpm-ak-public", BinaryParserHarness.input(.publicArea, attestation.attestationKeyPublicArea)),
            (
                "swtpm-ek-chain",
                BinaryParserHarness.input(
                    .endorsementChain, BinaryParserHarness.chainPayload([endorsement] + intermediate + root))
            ),
            (
                "swtpm-ek-certificate",
                BinaryParserHarness.input(.endorsementChain, BinaryParserHarness.chainPayload([endorsement]))
            ),
            (
                "swtpm-attestation",
                BinaryParserHarness.input(
                    .attestation,
                    BinaryParserHarness.attestationPayload(
                        publicKey: key.publicKey, nonce: nonce, roots: root + intermediate, time: now,
                        attestation: attestation))
            ),
        ]
    }

    @Test(
        "a real swtpm's structures are accepted in every mode, and their truncations and byte changes keep the invariants"
    )
    func seedsFromSoftwareTPM() throws {
        let tpm = try SoftwareTPM(endorsementCertificates: true)
        defer { withExtendedLifetime(tpm) {} }
        let seeds = try Self.seeds(from: tpm)
        // KEYAUTH_WRITE_FUZZ_SEEDS=DIR writes them, to refresh Fuzz/binary-corpus.
        if let directory = ProcessInfo.processInfo.environment["KEYAUTH_WRITE_FUZZ_SEEDS"] {
            for (name, input) in seeds {
                try Data(input).write(to: URL(fileURLWithPath: directory + "/" + name))
            }
        }
        for (name, input) in seeds {
            let outcome = BinaryParserHarness.check(input)
            #expect(outcome.accepted, "\(name)")
            #expect(outcome.violations.isEmpty, "\(name): \(outcome.violations)")
            if name == "swtpm-attestation" { #expect(outcome.attested) }
            for length in stride(from: 1, to: input.count, by: max(1, input.count / 97)) {
                let truncated = BinaryParserHarness.check(Array(input.prefix(length)))
                #expect(truncated.violations.isEmpty, "\(name) cut at \(length): \(truncated.violations)")
            }
            for index in stride(from: 1, to: input.count, by: max(1, input.count / 211)) {
                var changed = input
                changed[index] ^= 0xA5
                let outcome = BinaryParserHarness.check(changed)
                #expect(outcome.violations.isEmpty, "\(name) byte \(index): \(outcome.violations)")
                if name == "swtpm-certify-info" || name == "swtpm-attestation", index > 16 {
                    #expect(!outcome.attested)
                }
            }
        }
    }
}
