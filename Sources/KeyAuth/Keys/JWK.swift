/// An RSA public JSON Web Key (RFC 7517), limited to the members a thumbprint uses.
public struct JWK: Sendable, Hashable, Codable {
    /// `kty`: always "RSA" for keyauth keys.
    public var keyType: String
    /// `n`: the modulus, base64url.
    public var modulus: String
    /// `e`: the public exponent, base64url.
    public var exponent: String

    enum CodingKeys: String, CodingKey {
        case keyType = "kty"
        case modulus = "n"
        case exponent = "e"
    }

    public init(keyType: String = "RSA", modulus: String, exponent: String) {
        self.keyType = keyType
        self.modulus = modulus
        self.exponent = exponent
    }

    /// The canonical JSON of RFC 7638 section 3: required members only, sorted, no whitespace.
    public var canonicalJSON: String {
        JSONValue.object(["e": .string(exponent), "kty": .string(keyType), "n": .string(modulus)]).serialized()
    }

    /// The RFC 7638 SHA-256 thumbprint, base64url without padding (43 characters).
    public var thumbprint: String {
        Base64URL.encode(OpenSSL.sha256Digest(Array(canonicalJSON.utf8)))
    }

    /// The JWK as a JSON object, with extra members such as `kid`, `alg` and `use`.
    package func jsonValue(extra: [String: JSONValue] = [:]) -> JSONValue {
        var members: [String: JSONValue] = ["kty": .string(keyType), "n": .string(modulus), "e": .string(exponent)]
        members.merge(extra) { _, new in new }
        return .object(members)
    }
}
