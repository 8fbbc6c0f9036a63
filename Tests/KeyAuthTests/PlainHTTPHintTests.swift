import CKeyAuthCurl
import Foundation
import Testing

@testable import KeyAuth

/// The hint for an `https://` URL to a plain-HTTP server, from both ways such a handshake fails,
/// and the messages of the other transport failures.
@Suite("The https-to-plain-HTTP hint and transport messages")
struct PlainHTTPHintTests {
    private func failure(_ code: CURLcode, _ text: String) -> CurlTransfer.Failure {
        CurlTransfer.Failure(code: code, text: text, systemError: code == CURLE_COULDNT_CONNECT ? ECONNREFUSED : 0)
    }

    @Test("an answer read as a TLS record, and a server closing at its timeout, both get the hint over https only")
    func hint() {
        let answered = failure(CURLE_SSL_CONNECT_ERROR, "error:0A00010B:SSL routines::wrong version number")
        let closed = failure(
            CURLE_SSL_CONNECT_ERROR, "OpenSSL SSL_connect: SSL_ERROR_SYSCALL in connection to 127.0.0.1:8088 ")
        #expect(HTTPExchange.isPlainHTTPAnswer(answered, server: "https://127.0.0.1:8088"))
        #expect(HTTPExchange.isPlainHTTPAnswer(closed, server: "https://127.0.0.1:8088"))
        #expect(!HTTPExchange.isPlainHTTPAnswer(closed, server: "http://127.0.0.1:8088"))
        #expect(
            !HTTPExchange.isPlainHTTPAnswer(
                failure(CURLE_OPERATION_TIMEDOUT, "Operation timed out"), server: "https://127.0.0.1:8088"))
        let message = HTTPExchange.transportError(answered, server: "https://127.0.0.1:8088", timeout: 5).message
        #expect(message == "TLS handshake with the server at https://127.0.0.1:8088 failed; is this an http:// server?")
    }

    @Test("each transport failure names what happened and the server, never libcurl's text")
    func messages() {
        let server = "https://auth.example"
        let cases: [(CURLcode, String, KeyAuthError.Code, String)] = [
            (CURLE_OPERATION_TIMEDOUT, "secret-ish text", .transportFailed, "did not answer within 7 s"),
            (CURLE_COULDNT_CONNECT, "LIBCURL-DETAIL", .transportFailed, "connection refused"),
            (CURLE_COULDNT_RESOLVE_HOST, "LIBCURL-DETAIL", .transportFailed, "cannot find the server host"),
            (CURLE_GOT_NOTHING, "LIBCURL-DETAIL", .transportFailed, "closed the connection without an answer"),
            (CURLE_UNSUPPORTED_PROTOCOL, "Received HTTP/0.9", .transportFailed, "did not answer with HTTP"),
            (CURLE_PARTIAL_FILE, "LIBCURL-DETAIL", .transportFailed, "broke off"),
            (CURLE_PEER_FAILED_VERIFICATION, "LIBCURL-DETAIL", .transportFailed, "certificate is not trusted"),
            (CURLE_ABORTED_BY_CALLBACK, "LIBCURL-DETAIL", .cancelled, "was cancelled"),
        ]
        for (code, text, expectedCode, expected) in cases {
            let error = HTTPExchange.transportError(failure(code, text), server: server, timeout: 7)
            #expect(error.code == expectedCode, "\(code)")
            #expect(error.message.contains(expected) && error.message.contains(server), "\(error.message)")
            #expect(!error.message.contains(text), "\(error.message)")
        }
        let large = CurlTransfer.Failure(code: CURLE_WRITE_ERROR, text: "LIBCURL-DETAIL", tooLarge: true)
        #expect(HTTPExchange.transportError(large, server: server, timeout: 7).message.contains("larger than 1 MiB"))
    }

    @Test("a timeout becomes whole milliseconds, and one without a bound becomes none")
    func milliseconds() {
        #expect(HTTPExchange.milliseconds(1.5) == 1500)
        #expect(HTTPExchange.milliseconds(0.0001) == 1)
        #expect(HTTPExchange.milliseconds(.infinity) == 0)
        #expect(HTTPExchange.milliseconds(-1) == 0)
        #expect(HTTPExchange.milliseconds(.nan) == 0)
    }
}
