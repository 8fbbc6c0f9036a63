import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

/// Requests that once ended the whole server process (a Swift trap is `Illegal instruction` for
/// every user at once), sent to the built `keyauth-server` over a real socket: each must get an
/// answer, and the server must answer the next request as if nothing happened.
@Suite("One request cannot stop the server", .timeLimit(.minutes(10)))
struct ServerSurvivalTests {
    /// A server of the built binary with `arguments`, in a scratch directory.
    private static func withServer(
        _ arguments: [String], _ body: (KeyAuthServerProcess) throws -> Void
    ) throws {
        let directory = TemporaryDirectory("keyauth-survival")
        defer { directory.remove() }
        let server = try KeyAuthServerProcess(
            name: "survival", database: directory.path + "/server.db", issuer: "http://127.0.0.1",
            logPath: directory.path + "/server.log", extraArguments: arguments)
        try server.waitUntilListening()
        defer { server.terminate() }
        try body(server)
        try expectAlive(server)
    }

    /// The server still answers, and its log shows no trap.
    private static func expectAlive(_ server: KeyAuthServerProcess) throws {
        let connection = try RawHTTPConnection(port: server.port)
        try connection.send("GET /.well-known/jwks.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        let response = try connection.readResponse()
        #expect(response.status == 200, "the server stopped answering: \(server.log)")
        #expect(!server.log.contains("Fatal error"), "\(server.log)")
        #expect(!server.log.contains("overflow"), "\(server.log)")
    }

    /// `POST /oauth/token` with `form` and a `DPoP` header, on a new connection.
    private static func tokenRequest(port: UInt16, proof: String, form: String) throws -> RawHTTPResponse {
        let connection = try RawHTTPConnection(port: port)
        try connection.send(
            "POST /oauth/token HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                + "DPoP: \(proof)\r\nContent-Length: \(form.utf8.count)\r\n\r\n\(form)")
        return try connection.readResponse()
    }

    @Test(
        "a DPoP nonce whose time bytes are Int64.min, Int64.max or 0 gets use_dpop_nonce, and the server lives",
        arguments: [
            [0x80] + [UInt8](repeating: 0, count: 7), [0x7F] + [UInt8](repeating: 0xFF, count: 7),
            [UInt8](repeating: 0, count: 8), [UInt8](repeating: 0xFF, count: 8),
        ])
    func hostileNonceTime(time: [UInt8]) throws {
        try Self.withServer(["--dpop-nonce"]) { server in
            // 24 bytes as the server's nonces are: 8 of time, 16 of a tag that is not the server's.
            let nonce = Base64URL.encode(time + [UInt8](repeating: 0x41, count: 16))
            let key = try ServerTestKeys.key("survival-dpop")
            let proof = try DPoPProofBuilder(key: key).proof(
                method: "POST", url: "http://127.0.0.1/oauth/token", nonce: nonce)
            let form = "grant_type=\(TestAPI.formEncode(TestAPI.jwtBearer))&assertion=x.y.z"
            let response = try Self.tokenRequest(port: server.port, proof: proof, form: form)
            #expect(response.status == 400)
            #expect(response.errorCode == "use_dpop_nonce")
            #expect(response.headers["dpop-nonce"] != nil)
        }
    }
}
