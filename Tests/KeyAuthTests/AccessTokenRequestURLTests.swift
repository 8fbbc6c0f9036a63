import KeyAuth
import Testing

/// `AccessTokenVerifier.requestURL(origin:target:)`: the URL a proof is checked against comes
/// from the service's configured origin and a request target that cannot move it.
@Suite("The request URL a DPoP proof must name")
struct AccessTokenRequestURLTests {
    @Test("an origin and a path make the URL; a trailing slash of the origin is dropped")
    func joins() throws {
        #expect(
            try AccessTokenVerifier.requestURL(origin: "https://api.example", target: "/orders")
                == "https://api.example/orders")
        #expect(
            try AccessTokenVerifier.requestURL(origin: "http://127.0.0.1:8080/", target: "/a?b=c")
                == "http://127.0.0.1:8080/a?b=c")
        #expect(try AccessTokenVerifier.requestURL(origin: "https://[::1]:8443", target: "/") == "https://[::1]:8443/")
    }

    @Test(
        "a target that is not a path cannot move the origin to another service's",
        arguments: [
            ".evil.example/orders", ":8080/orders", "@evil.example/orders", "", "orders", "/a#b", "/a b", "/a\u{7F}",
        ]
    )
    func refusesTargets(_ target: String) {
        #expect(throws: KeyAuthError.self) {
            try AccessTokenVerifier.requestURL(origin: "https://api.example", target: target)
        }
    }

    @Test(
        "an origin with a path, a query, credentials or another scheme is refused",
        arguments: [
            "https://api.example/base", "https://api.example?x", "https://user@api.example", "ftp://api.example",
            "https://", "api.example", "https://api.example/ ",
        ]
    )
    func refusesOrigins(_ origin: String) {
        #expect(throws: KeyAuthError.self) {
            try AccessTokenVerifier.requestURL(origin: origin, target: "/orders")
        }
    }
}
