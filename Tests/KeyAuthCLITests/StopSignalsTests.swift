import Foundation
import Testing

@testable import KeyAuthCLI

#if canImport(Glibc)
    import Glibc
#endif

@Suite("Stop signals handed from the handler to their thread")
struct StopSignalsTests {
    @Test("signals that arrive together are handed on with the first one ahead, each once")
    func handOnOrder() {
        let interruptAndTerminate = (UInt64(1) << UInt64(SIGINT)) | (UInt64(1) << UInt64(SIGTERM))
        #expect(StopSignals.handOnOrder(interruptAndTerminate, first: SIGTERM) == [SIGTERM, SIGINT])
        #expect(StopSignals.handOnOrder(interruptAndTerminate, first: SIGINT) == [SIGINT, SIGTERM])
        // A first signal already handed on earlier is not repeated.
        #expect(StopSignals.handOnOrder(UInt64(1) << UInt64(SIGHUP), first: SIGINT) == [SIGHUP])
        #expect(StopSignals.handOnOrder(0, first: SIGINT).isEmpty)
    }
}
