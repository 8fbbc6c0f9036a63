import KeyAuth
import Testing

@Suite("JWT claims")
struct JWTClaimsTests {
    @Test("typed getters read their type and refuse anything else with claimInvalid")
    func typedGetters() throws {
        var claims = JWTClaims()
        claims.set("sub", string: "alice")
        claims.set("iat", integer: 1_800_000_000)
        claims.set("admin", bool: true)
        claims.set("scopes", strings: ["read", "write"])
        #expect(try claims.string("sub") == "alice")
        #expect(try claims.integer("iat") == 1_800_000_000)
        #expect(try claims.bool("admin"))
        #expect(try claims.strings("scopes") == ["read", "write"])
        #expect(try claims.strings("sub") == ["alice"])
        #expect(claims.contains("iat") && !claims.contains("exp"))
        func refused(_ read: () throws -> Void) -> Bool {
            do {
                try read()
                return false
            } catch {
                return (error as? KeyAuthError)?.code == .claimInvalid
            }
        }
        #expect(refused { _ = try claims.string("iat") })
        #expect(refused { _ = try claims.string("missing") })
        #expect(refused { _ = try claims.integer("sub") })
        #expect(refused { _ = try claims.bool("sub") })
        #expect(refused { _ = try claims.strings("iat") })
        #expect(refused { _ = try claims.json("missing") })
    }

    @Test("an integer written with a fraction is not an integer")
    func fractionIsNoInteger() throws {
        var claims = JWTClaims()
        try claims.setJSON("exp", json: "1800000030.0")
        let error = #expect(throws: KeyAuthError.self) { try claims.integer("exp") }
        #expect(error?.code == .claimInvalid)
    }

    @Test("nested values are set from strict JSON and read back as JSON text")
    func nestedJSON() throws {
        var claims = JWTClaims()
        try claims.setJSON("cnf", json: " {\"jkt\": \"abc\"} ")
        #expect(try claims.json("cnf") == "{\"jkt\":\"abc\"}")
        for bad in ["{\"a\":1,\"a\":2}", "{", "1 2", ""] {
            let error = #expect(throws: KeyAuthError.self) { try claims.setJSON("x", json: bad) }
            #expect(error?.code == .invalidArgument, "\(bad)")
        }
        #expect(!claims.contains("x"))
    }

    @Test("claims are written iss, sub, aud first, then by name, whatever order they were set in")
    func order() throws {
        var claims = JWTClaims()
        claims.set("jti", string: "j")
        claims.set("aud", string: "a")
        claims.set("cnf", bool: true)
        claims.set("sub", string: "s")
        claims.set("exp", integer: 2)
        claims.set("iss", string: "i")
        #expect(claims.names == ["iss", "sub", "aud", "cnf", "exp", "jti"])
        claims.remove("cnf")
        claims.set("sub", string: "t")
        #expect(claims.names == ["iss", "sub", "aud", "exp", "jti"])
        #expect(try claims.string("sub") == "t")
    }
}
