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

    @Test("claims read from text have the order and values of the same claims set one by one")
    func parsedOrder() throws {
        let text = #"{"jti":"j","exp":2,"aud":["a","b"],"zz":{"k":[1,2.5]},"iss":"i","sub":"s","amr":["swk"]}"#
        let parsed = try JWTClaims(parsingObject: Array(text.utf8))
        guard case .object(let object) = try JSONValue(parsing: text) else {
            Issue.record("the text is an object")
            return
        }
        #expect(parsed == JWTClaims(object))
        #expect(parsed.names == ["iss", "sub", "aud", "amr", "exp", "jti", "zz"])
        #expect(try parsed.strings("aud") == ["a", "b"])
        #expect(try parsed.json("zz") == #"{"k":[1,2.5]}"#)
    }

    @Test("claims that arrive in their order are read in that order, as set one by one")
    func parsedInOrder() throws {
        var claims = JWTClaims()
        claims.set("iss", string: "i")
        claims.set("sub", string: "s")
        claims.set("aud", string: "a")
        claims.set("amr", strings: ["swk"])
        claims.set("exp", integer: 2)
        claims.set("jti", string: "j")
        let parsed = try JWTClaims(parsingObject: claims.serializedBytes())
        #expect(parsed == claims)
        #expect(parsed.names == ["iss", "sub", "aud", "amr", "exp", "jti"])
    }

    @Test("a name repeated anywhere in the object, or in canonically equivalent spellings, is refused")
    func parsedRepeats() {
        for text in [
            #"{"a":1,"b":2,"a":3}"#, #"{"iss":"x","iss":"x"}"#, #"{"z":1,"y":2,"x":3,"z":4}"#,
            // In order up to the repeat, which the in-order check alone must not let through.
            #"{"iss":"i","sub":"s","aud":"a","exp":1,"jti":"j","jti":"k"}"#,
            "{\"\u{E9}\":1,\"e\u{301}\":2}",
        ] {
            #expect(throws: JSONValue.ParseError.self, "\(text)") { try JWTClaims(parsingObject: Array(text.utf8)) }
        }
        #expect(throws: JSONValue.ParseError.self) { try JWTClaims(parsingObject: Array("[1]".utf8)) }
        #expect(throws: Never.self) { try JWTClaims(parsingObject: Array(" {} ".utf8)) }
    }

    @Test("merging gives what setting each of the other's claims in turn gives")
    func mergeMatchesSetting() {
        let pool = ["iss", "sub", "aud", "amr", "cnf", "exp", "iat", "jti", "scope", "é", "zz", "a"]
        var generator = SeededBytes(seed: 3)
        for round in 0..<200 {
            var mine = JWTClaims()
            var theirs = JWTClaims()
            for name in pool {
                let choice = generator.next() % 4
                if choice == 1 || choice == 3 { mine.set(name, integer: Int64(round)) }
                if choice == 2 || choice == 3 { theirs.set(name, string: "\(name)\(round)") }
            }
            var merged = mine
            merged.merge(theirs)
            var setOneByOne = mine
            for name in theirs.names { setOneByOne.setJSONValue(name, from: theirs) }
            #expect(merged == setOneByOne, "round \(round)")
            #expect(merged.names == setOneByOne.names, "round \(round)")
        }
    }
}

extension JWTClaims {
    /// Sets `name` to its value in `other` through the one-claim path.
    fileprivate mutating func setJSONValue(_ name: String, from other: JWTClaims) {
        self[name] = other[name]
    }
}
