import KeyAuth
import KeyAuthTestSupport

/// Assertions that break one rule of PROTOCOL.md section 2 each; every one must get
/// `invalid_grant` at login (and as a registration proof).
enum HostileAssertion: String, CaseIterable, Sendable, CustomStringConvertible {
    case algorithmNone
    case algorithmNoneWithSignature
    case hs256WithPublicKeyAsSecret
    case tamperedPayload
    case signedByAnotherKey
    case unknownKey
    case subjectNotTheKey
    case issuerNotTheKey
    case expired
    case issuedInTheFuture
    case lifetimeOverMaximum
    case wrongAudience
    case missingAudience
    case missingJWTID
    case nonIntegerExpiry
    case critHeader
    case jwkHeader
    case jkuHeader
    case x5cHeader
    case paddedBase64
    case standardBase64Alphabet
    case twoSegments
    case fourSegments
    case emptyToken
    case headerNotJSON
    case payloadNotJSON
    case payloadJSONArray
    case longerThan8KiB
    case duplicateClaim
    case keyIDWithNUL

    var description: String { rawValue }

    /// Builds the assertion for the device `key` (registered), with `other` an unregistered key.
    func make(api: TestAPI, key: RSAPrivateKey, other: RSAPrivateKey) throws -> String {
        let kid = key.publicKey.fingerprint
        let header: JSONValue = .object(["alg": "RS256", "typ": "JWT", "kid": .string(kid)])
        let claims = try api.defaultClaims(key)
        let now = api.clock.now
        switch self {
        case .algorithmNone:
            let unsigned = try api.signed(
                header: .object(["alg": "none", "typ": "JWT", "kid": .string(kid)]), payload: .object(claims), key: key)
            let parts = unsigned.split(separator: ".", omittingEmptySubsequences: false)
            return "\(parts[0]).\(parts[1])."
        case .algorithmNoneWithSignature:
            return try api.signed(
                header: .object(["alg": "none", "typ": "JWT", "kid": .string(kid)]), payload: .object(claims), key: key)
        case .hs256WithPublicKeyAsSecret:
            let headerPart = Base64URL.encode(
                Array(JSONValue.object(["alg": "HS256", "typ": "JWT", "kid": .string(kid)]).serialized().utf8))
            let payloadPart = Base64URL.encode(Array(JSONValue.object(claims).serialized().utf8))
            let input = Array("\(headerPart).\(payloadPart)".utf8)
            let mac = try hmacSHA256(key: Array(key.publicKey.pemRepresentation.utf8), message: input)
            return "\(headerPart).\(payloadPart).\(Base64URL.encode(mac))"
        case .tamperedPayload:
            let valid = try api.signed(header: header, payload: .object(claims), key: key)
            var tampered = claims
            tampered["exp"] = .integer(now + 250)
            let parts = valid.split(separator: ".")
            return "\(parts[0]).\(Base64URL.encode(Array(JSONValue.object(tampered).serialized().utf8))).\(parts[2])"
        case .signedByAnotherKey:
            return try api.signed(header: header, payload: .object(claims), key: other)
        case .unknownKey:
            return try api.assertion(other)
        case .subjectNotTheKey:
            return try api.assertion(key, claims: ["sub": .string(other.publicKey.fingerprint)])
        case .issuerNotTheKey:
            return try api.assertion(key, claims: ["iss": "someone-else"])
        case .expired:
            return try api.assertion(key, claims: ["iat": .integer(now - 100), "exp": .integer(now - 70)])
        case .issuedInTheFuture:
            return try api.assertion(key, claims: ["iat": .integer(now + 60), "exp": .integer(now + 90)])
        case .lifetimeOverMaximum:
            return try api.assertion(key, claims: ["iat": .integer(now), "exp": .integer(now + 301)])
        case .wrongAudience:
            return try api.assertion(key, claims: ["aud": "https://other.example"])
        case .missingAudience:
            return try api.assertion(key, claims: ["aud": .null])
        case .missingJWTID:
            return try api.assertion(key, claims: ["jti": .null])
        case .nonIntegerExpiry:
            return try api.assertion(key, claims: ["exp": .string(String(now + 30))])
        case .critHeader, .jwkHeader, .jkuHeader, .x5cHeader:
            var members = header.objectValue ?? [:]
            switch self {
            case .critHeader: members["crit"] = .array(["exp"])
            case .jwkHeader: members["jwk"] = key.publicKey.jwk.jsonValue()
            case .jkuHeader: members["jku"] = "https://attacker.example/jwks.json"
            default: members["x5c"] = .array(["MIIB"])
            }
            return try api.signed(header: .object(members), payload: .object(claims), key: key)
        case .paddedBase64:
            // A payload whose encoding needs padding, then padded.
            var padded = claims
            while Array(JSONValue.object(padded).serialized().utf8).count % 3 == 0 {
                padded["x"] = .string((padded["x"]?.stringValue ?? "") + "a")
            }
            let token = try api.signed(header: header, payload: .object(padded), key: key)
            let parts = token.split(separator: ".")
            let pad = String(repeating: "=", count: (4 - parts[1].count % 4) % 4)
            return "\(parts[0]).\(parts[1])\(pad).\(parts[2])"
        case .standardBase64Alphabet:
            var attempt = 0
            while true {
                let token = try api.assertion(key, claims: ["n": .integer(Int64(attempt))])
                let parts = token.split(separator: ".")
                if parts[2].contains("-") || parts[2].contains("_") {
                    let standard = parts[2].map { $0 == "-" ? "+" : $0 == "_" ? "/" : $0 }
                    return "\(parts[0]).\(parts[1]).\(String(standard))"
                }
                attempt += 1
            }
        case .twoSegments:
            let parts = try api.assertion(key).split(separator: ".")
            return "\(parts[0]).\(parts[1])"
        case .fourSegments:
            return try api.assertion(key) + ".AAAA"
        case .emptyToken:
            return "."
        case .headerNotJSON:
            let parts = try api.assertion(key).split(separator: ".")
            return "\(Base64URL.encode(Array("not json".utf8))).\(parts[1]).\(parts[2])"
        case .payloadNotJSON:
            return try JWTBuilder.sign(
                headerJSON: Array(header.serialized().utf8), payloadJSON: Array("{\"sub\":".utf8), key: key)
        case .payloadJSONArray:
            return try JWTBuilder.sign(
                headerJSON: Array(header.serialized().utf8), payloadJSON: Array("[1,2,3]".utf8), key: key)
        case .longerThan8KiB:
            return try api.assertion(key, claims: ["padding": .string(String(repeating: "a", count: 9000))])
        case .keyIDWithNUL:
            // The registered key id and more, in kid, sub and iss alike: a C string ends at the NUL.
            let spelled = JSONValue.string(kid + "\u{0}x")
            var renamed = claims
            renamed["sub"] = spelled
            renamed["iss"] = spelled
            return try api.signed(
                header: .object(["alg": "RS256", "typ": "JWT", "kid": spelled]), payload: .object(renamed), key: key)
        case .duplicateClaim:
            let body = JSONValue.object(claims).serialized()
            let duplicated = String(body.dropLast()) + ",\"exp\":\(now + 250)}"
            return try JWTBuilder.sign(
                headerJSON: Array(header.serialized().utf8), payloadJSON: Array(duplicated.utf8), key: key)
        }
    }
}
