/// A public JSON Web Key (RFC 7517) of one of the three kinds keyauth signs with: RSA, an EC
/// P-256 key (RFC 7518 section 6.2) or an Ed25519 octet key pair (RFC 8037 section 2), limited
/// to the members its thumbprint uses.
///
/// One type serves device keys, the server's JWK set and the `jwk` header of DPoP proofs, so that
/// all three compute thumbprints one way. It holds text as it travels; turning it into a key that
/// verifies (``JWSPublicKey/init(jwk:)``) is where the members are checked.
public struct JWK: Sendable, Hashable, Codable {
    /// `kty`: `RSA`, `EC` or `OKP`.
    public var keyType: String
    /// `n`: the RSA modulus, base64url; nil for other key types.
    public var modulus: String?
    /// `e`: the RSA public exponent, base64url; nil for other key types.
    public var exponent: String?
    /// `crv`: `P-256` for EC, `Ed25519` for OKP; nil for RSA.
    public var curve: String?
    /// `x`: the EC x coordinate, or the Ed25519 public key, base64url.
    public var x: String?
    /// `y`: the EC y coordinate, base64url; nil for other key types.
    public var y: String?

    enum CodingKeys: String, CodingKey {
        case keyType = "kty"
        case modulus = "n"
        case exponent = "e"
        case curve = "crv"
        case x
        case y
    }

    /// The members that make a JWK private (RFC 7518 sections 6.2.2, 6.3.2 and 6.4; RFC 8037
    /// section 2): a JWK carrying any of them is refused wherever a public key is expected.
    public static let privateMembers: Set<String> = ["d", "p", "q", "dp", "dq", "qi", "oth", "k"]

    /// An RSA key.
    public init(keyType: String = "RSA", modulus: String, exponent: String) {
        self.keyType = keyType
        self.modulus = modulus
        self.exponent = exponent
    }

    /// An EC key (`kty` `EC`) on `curve`, with its coordinates.
    public init(ellipticCurve curve: String, x: String, y: String) {
        keyType = "EC"
        self.curve = curve
        self.x = x
        self.y = y
    }

    /// An octet key pair (`kty` `OKP`, RFC 8037) on `curve`, with its public key.
    public init(octetKeyPair curve: String, x: String) {
        keyType = "OKP"
        self.curve = curve
        self.x = x
    }

    /// Reads a public JWK from JSON: `kty` and the members its type requires, as strings.
    ///
    /// Other members (`kid`, `alg`, `use`, ...) are left for the caller to read.
    /// - Throws: `.keyRejected` when a private member is present (a private key must never be
    ///   taken for a public one, nor kept); `.keyCorrupt` for an unknown `kty` or a required
    ///   member that is missing or not a string.
    package init(jsonValue: JSONValue) throws(KeyAuthError) {
        guard let object = jsonValue.objectValue else { throw KeyAuthError(.keyCorrupt, "a JWK is a JSON object") }
        if object.keys.contains(where: Self.privateMembers.contains) {
            throw KeyAuthError(.keyRejected, "the JWK holds private key members")
        }
        func member(_ name: String) throws(KeyAuthError) -> String {
            guard let value = object[name]?.stringValue else {
                throw KeyAuthError(.keyCorrupt, "the JWK has no \"\(name)\" string")
            }
            return value
        }
        switch object["kty"]?.stringValue {
        case "RSA"?: self.init(modulus: try member("n"), exponent: try member("e"))
        case "EC"?: self.init(ellipticCurve: try member("crv"), x: try member("x"), y: try member("y"))
        case "OKP"?: self.init(octetKeyPair: try member("crv"), x: try member("x"))
        default: throw KeyAuthError(.keyCorrupt, "the JWK key type must be RSA, EC or OKP")
        }
    }

    /// The required members of the key's type, by name.
    private var requiredMembers: [String: JSONValue] {
        var members: [String: JSONValue] = ["kty": .string(keyType)]
        if let modulus { members["n"] = .string(modulus) }
        if let exponent { members["e"] = .string(exponent) }
        if let curve { members["crv"] = .string(curve) }
        if let x { members["x"] = .string(x) }
        if let y { members["y"] = .string(y) }
        return members
    }

    /// The canonical JSON of RFC 7638 section 3: required members only, sorted, no whitespace
    /// (`e`, `kty`, `n` for RSA; `crv`, `kty`, `x`, `y` for EC; `crv`, `kty`, `x` for OKP, as RFC
    /// 8037 section 2 says).
    public var canonicalJSON: String {
        JSONValue.object(requiredMembers).serialized()
    }

    /// The RFC 7638 SHA-256 thumbprint, base64url without padding (43 characters).
    ///
    /// Keys compute theirs once, when they are built (``RSAPublicKey/fingerprint``,
    /// ``JWSPublicKey/thumbprint``), so that reading it later cannot fail.
    /// - Throws: `.cryptoFailed` when OpenSSL cannot digest.
    public func thumbprint() throws(KeyAuthError) -> String {
        Base64URL.encode(try OpenSSL.sha256Digest(Array(canonicalJSON.utf8)))
    }

    /// The JWK as a JSON object, with extra members such as `kid`, `alg` and `use`.
    package func jsonValue(extra: [String: JSONValue] = [:]) -> JSONValue {
        var members = requiredMembers
        members.merge(extra) { _, new in new }
        return .object(members)
    }
}
