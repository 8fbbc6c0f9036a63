import Foundation
import KeyAuth
import KeyAuthFuzzSupport
import KeyAuthSSHAgentFuzzing
import Testing

/// The ssh-agent parser's fuzz seeds and findings, replayed through the fuzz harness by every
/// test run: a finding stays fixed, the seeds keep reaching the signing path, and the harness's
/// second reading of the protocol agrees with the parser.
@Suite("The ssh-agent fuzz corpus and findings replay without breaking an invariant")
struct SSHAgentFuzzCorpusTests {
    private static let fuzzDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Fuzz").path

    @Test(
        "every seed and every saved finding is answered as the protocol says",
        arguments: ["ssh-agent-corpus", "ssh-agent-findings"])
    func replay(directory: String) throws {
        let harness = try SSHAgentFuzzHarness()
        let files = try FuzzInputs.files([Self.fuzzDirectory + "/" + directory])
        for file in files {
            let violations = harness.run(Array(try Data(contentsOf: URL(fileURLWithPath: file))))
            #expect(violations.isEmpty, "\(file): \(violations)")
        }
        if directory == "ssh-agent-corpus" { #expect(files.count >= 10) }
    }

    @Test("the committed seeds are the harness's, and a signature seed gets a signature")
    func seedsAreCurrent() throws {
        let harness = try SSHAgentFuzzHarness()
        for (name, bytes) in try harness.seeds() {
            let stored = try Data(contentsOf: URL(fileURLWithPath: Self.fuzzDirectory + "/ssh-agent-corpus/" + name))
            #expect(Array(stored) == bytes, "\(name) differs: run keyauth-fuzz-ssh-agent --write-seeds")
        }
        let request = try #require(try harness.seeds()["sign-sha512-key"])
        let answer = SSHAgentProtocol.answer(request, identities: harness.identities) { _, data in data }
        #expect(answer.first == SSHAgentProtocol.signResponse)
    }

    @Test("a parser that answered a truncated request, or framed wrongly, would be caught")
    func harnessCatchesMistakes() throws {
        let harness = try SSHAgentFuzzHarness()
        let request = try #require(try harness.seeds()["sign-sha512-key"])
        // The harness's own expectation for a truncated request is failure, for the whole one a
        // signature; and its framing of two messages then a cut one is what it says.
        #expect(harness.expectedAnswer(Array(request.dropLast())).answer == [SSHAgentProtocol.failure])
        #expect(harness.expectedAnswer(request).answer.first == SSHAgentProtocol.signResponse)
        #expect(
            harness.expectedFrames([0, 0, 0, 1, 11, 0, 0, 0, 0, 0, 0, 0, 2, 1])
                == [.message([11]), .message([]), .truncated])
    }
}
