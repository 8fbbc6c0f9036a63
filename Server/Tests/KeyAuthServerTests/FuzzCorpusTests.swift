import Foundation
import KeyAuthServerFuzzing
import Testing

/// The whole-surface fuzz target's seeds and findings, replayed through the same harness
/// (``ServerFuzzHarness``) by every test run: a finding stays fixed, and the seeds keep reaching
/// past the checks they were written to pass.
@Suite("The server fuzz corpus and findings replay without breaking an invariant", .timeLimit(.minutes(5)))
struct FuzzCorpusTests {
    private static let fuzzDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fuzz").path

    @Test(
        "every seed and every saved finding is answered within the invariants",
        arguments: ["server-corpus", "server-findings"])
    func replay(directory: String) throws {
        let harness = try ServerFuzzHarness()
        let files = try ServerFuzzHarness.inputFiles([Self.fuzzDirectory + "/" + directory])
        for file in files {
            let violations = harness.run(Array(try Data(contentsOf: URL(fileURLWithPath: file))))
            #expect(violations.isEmpty, "\(file): \(violations)")
        }
        if directory == "server-corpus" { #expect(files.count >= 30) }
    }

    @Test("the seeds reach the deep paths: a CIBA approval is collected, a code is redeemed, a DPoP login succeeds")
    func seedsReachDeep() throws {
        let harness = try ServerFuzzHarness()
        for seed in ["ciba-approve", "oidc-code-flow", "login-dpop"] {
            let input = try Data(contentsOf: URL(fileURLWithPath: Self.fuzzDirectory + "/server-corpus/" + seed))
            let statuses = harness.statuses(Array(input))
            #expect(
                statuses.last == 200 || (seed == "oidc-code-flow" && statuses.contains(200)), "\(seed): \(statuses)")
            #expect(!statuses.contains { $0 >= 500 }, "\(seed): \(statuses)")
        }
    }
}
