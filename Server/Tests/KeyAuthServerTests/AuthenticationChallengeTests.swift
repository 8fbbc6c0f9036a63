import KeyAuth
import Testing

@testable import KeyAuthServer

@Suite("WWW-Authenticate challenges") struct AuthenticationChallengeTests {
    @Test("a description with a quote and a backslash stays one quoted-string")
    func escapesQuotesAndBackslashes() {
        let challenge = AuthenticationChallenge.bearer(
            realm: "keyauth", error: .invalidToken, description: #"the "kid" is C:\keys\a"#)
        #expect(
            challenge.headerValue
                == #"Bearer realm="keyauth", error="invalid_token", error_description="the \"kid\" is C:\\keys\\a""#)
    }

    @Test("a control character in a value cannot end the header field")
    func replacesControlCharacters() {
        let challenge = AuthenticationChallenge.bearer(error: .invalidToken, description: "a\r\nSet-Cookie: x=1")
        #expect(challenge.headerValue == #"Bearer error="invalid_token", error_description="a  Set-Cookie: x=1""#)
        #expect(!challenge.headerValue.contains("\n"))
    }

    @Test("the challenges the server sent before keep their exact text")
    func knownChallenges() {
        #expect(AuthenticationChallenge.bearer(error: .invalidToken).headerValue == #"Bearer error="invalid_token""#)
        #expect(AuthenticationChallenge.bearer(realm: "keyauth").headerValue == #"Bearer realm="keyauth""#)
        #expect(
            AuthenticationChallenge.bearer(realm: "keyauth", error: .insufficientScope, scope: "openid").headerValue
                == #"Bearer realm="keyauth", error="insufficient_scope", scope="openid""#)
        #expect(AuthenticationChallenge("Basic", ["realm": "keyauth"]).headerValue == #"Basic realm="keyauth""#)
        #expect(
            AuthenticationChallenge.dpop(error: .useDPoPNonce).headerValue.hasPrefix(
                #"DPoP error="use_dpop_nonce", algs=""#))
    }

    @Test("a UserInfo error description with a quote reaches the client escaped")
    func userInfoEscapes() throws {
        let (responder, _) = try TestEnvironment().makeResponder()
        // A token that is no JWT at all: refused as invalid_token, with the verifier's description.
        let response = responder.respond(
            to: HTTPRequest(
                method: "GET", path: "/userinfo", headers: ["Authorization": "Bearer not\"a\\token"],
                clientAddress: "192.0.2.1"))
        #expect(response.status == 401)
        let challenge = try #require(response.headers["WWW-Authenticate"])
        #expect(challenge.hasPrefix(#"Bearer realm="keyauth", error="invalid_token", error_description=""#))
        let value = challenge.dropFirst(#"Bearer realm="keyauth", error="invalid_token", error_description=""#.count)
        // Inside the quoted value, every quote is escaped, so that the value ends only at the last one.
        #expect(value.hasSuffix("\""))
        var escaped = false
        for character in value.dropLast() {
            if escaped {
                escaped = false
            } else if character == "\\" {
                escaped = true
            } else {
                #expect(character != "\"")
            }
        }
    }
}
