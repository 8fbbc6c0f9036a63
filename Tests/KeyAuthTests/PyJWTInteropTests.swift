import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

/// Interoperability with PyJWT (an independent implementation); `.ci/run` installs it.
@Suite("Interoperability with PyJWT", .timeLimit(.minutes(10)))
struct PyJWTInteropTests {
    /// Runs a Python snippet with arguments and returns its status and standard output, with
    /// standard error after it (which shows why a failing snippet failed).
    private func python(_ script: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
        let run = try ExternalCommand.run(["python3", "-c", script] + arguments)
        return (run.status, (run.output + run.errorOutput).trimmingCharacters(in: .whitespacesAndNewlines))
    }

    @Test("a token from the library verifies with PyJWT, with the expected claims")
    func libraryToPyJWT() throws {
        let key = TestKeys.first
        var claims = JWTClaims()
        claims.set("scope", string: "demo")
        let token = try JWTBuilder(key: key, audience: "https://auth.example.test").sign(claims: claims)
        let script = """
            import sys, jwt
            claims = jwt.decode(sys.argv[1], sys.argv[2], algorithms=["RS256"], audience="https://auth.example.test")
            header = jwt.get_unverified_header(sys.argv[1])
            print(claims["sub"], claims["scope"], header["kid"], header["typ"])
            """
        let result = try python(script, [token, key.publicKey.pemRepresentation])
        #expect(result.status == 0, "\(result.output)")
        let fingerprint = key.publicKey.fingerprint
        #expect(result.output == "\(fingerprint) demo \(fingerprint) JWT")
    }

    @Test("a token from PyJWT verifies with the library, and PyJWT's tampered one does not")
    func pyJWTToLibrary() throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let key = TestKeys.second
        let keyFile = temporary.path + "/key.pem"
        try Data(try key.pkcs8PEM()).write(to: URL(fileURLWithPath: keyFile))
        let fingerprint = key.publicKey.fingerprint
        let script = """
            import sys, time, jwt
            now = int(time.time())
            print(jwt.encode({"iss": sys.argv[2], "sub": sys.argv[2], "aud": "https://auth.example.test",
                              "iat": now, "exp": now + 30, "jti": "pyjwt-1"},
                             open(sys.argv[1]).read(), algorithm="RS256", headers={"kid": sys.argv[2]}))
            """
        let result = try python(script, [keyFile, fingerprint])
        #expect(result.status == 0, "\(result.output)")
        let verifier = DeviceAssertionVerifier(audience: "https://auth.example.test")
        let assertion = try verifier.parse(result.output)
        #expect(assertion.keyID == fingerprint)
        let verified = try verifier.verify(assertion, key: key.publicKey)
        #expect(verified.subject == fingerprint)
        #expect(verified.jwtID == "pyjwt-1")
        #expect(throws: KeyAuthError.self) {
            try verifier.verify(verifier.parse(result.output), key: TestKeys.first.publicKey)
        }
    }
}
