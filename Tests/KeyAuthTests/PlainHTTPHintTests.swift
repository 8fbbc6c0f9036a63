import Foundation
import Testing

@testable import KeyAuth

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The hint for an `https://` URL to a plain-HTTP server, from both ways such a handshake fails.
@Suite("The https-to-plain-HTTP hint")
struct PlainHTTPHintTests {
    private func error(_ text: String) -> URLError {
        URLError(.unknown, userInfo: [NSLocalizedDescriptionKey: text])
    }

    @Test("an answer read as a TLS record, and a server closing at its timeout, both get the hint over https only")
    func hint() {
        let answered = error("OpenSSL SSL_connect: error:0A00010B:SSL routines::wrong version number")
        let closed = error("OpenSSL SSL_connect: SSL_ERROR_SYSCALL in connection to 127.0.0.1:8088 ")
        #expect(HTTPExchange.isPlainHTTPAnswer(answered, server: "https://127.0.0.1:8088"))
        #expect(HTTPExchange.isPlainHTTPAnswer(closed, server: "https://127.0.0.1:8088"))
        #expect(!HTTPExchange.isPlainHTTPAnswer(closed, server: "http://127.0.0.1:8088"))
        #expect(!HTTPExchange.isPlainHTTPAnswer(error("Operation timed out"), server: "https://127.0.0.1:8088"))
    }
}
