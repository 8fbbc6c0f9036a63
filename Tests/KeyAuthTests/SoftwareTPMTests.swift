import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

/// The software TPM that the TPM tests stand on: it must never hand a test a port that something
/// else answers on.
@Suite("Software TPM harness", .timeLimit(.minutes(10)))
struct SoftwareTPMTests {
    @Test("a port held by another test's listener is not taken for the TPM; another port is, and it answers")
    func foreignListenerIsNotTheTPM() throws {
        // Another test's HTTP listener, as CI met it: swtpm cannot bind this port, but the
        // listener accepts connections on it.
        let foreign = try LoopbackHTTPResponder { _ in nil }
        let tpm = try SoftwareTPM(firstPort: foreign.port)
        #expect(tpm.port != foreign.port)
        #expect(tpm.isRunning)
        let info = try tpm.connection.info()
        #expect(info.maximumTries == 3)
    }

    @Test("ports are chosen below the kernel's ephemeral range, which port 0 and clients draw from")
    func portsBelowEphemeralRange() throws {
        let range = try String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)
        let first = try #require(range.split(whereSeparator: \.isWhitespace).first.flatMap { UInt16($0) })
        let tpm = try SoftwareTPM()
        #expect(tpm.port >= 20_000)
        #expect(tpm.port + 1 < first)
    }
}
