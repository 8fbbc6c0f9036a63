/// A JWK set (RFC 7517 section 5): an issuer's published verification keys by `kid`.
///
/// Reading is forgiving about keys it cannot use and strict about the ones it keeps: an entry
/// for encryption (`use` other than `sig`), of an unknown type or curve, without a `kid`, or
/// whose `alg` is not its key type's algorithm is left out, so that an issuer publishing
/// something new does not break its verifiers; an entry holding private members is refused,
/// since a set that leaks a private key must not be trusted at all.
public struct JWKSet: Sendable, Hashable {
    /// The usable keys by `kid`.
    public let keys: [String: JWSPublicKey]

    /// A set of keys a caller already holds.
    public init(keys: [String: JWSPublicKey]) {
        self.keys = keys
    }

    /// Reads a JWK set document.
    ///
    /// - Throws: `.keyCorrupt` for a document that is not `{"keys": [...]}`; `.keyRejected` for
    ///   a key with private members.
    public init(json: [UInt8]) throws(KeyAuthError) {
        guard let document = try? JSONValue(parsing: json), let entries = document["keys"]?.arrayValue else {
            throw KeyAuthError(.keyCorrupt, "the JWK set is not a JSON object with a keys array")
        }
        var keys: [String: JWSPublicKey] = [:]
        for entry in entries {
            guard let kid = entry["kid"]?.stringValue, !kid.isEmpty else { continue }
            if let use = entry["use"]?.stringValue, use != "sig" { continue }
            let jwk: JWK
            do {
                jwk = try JWK(jsonValue: entry)
            } catch {
                if error.code == .keyRejected { throw error }
                continue
            }
            guard let key = try? JWSPublicKey(jwk: jwk) else { continue }
            if let alg = entry["alg"]?.stringValue, alg != key.algorithm.rawValue { continue }
            keys[kid] = key
        }
        self.keys = keys
    }

    /// The key published as `kid`.
    public subscript(kid: String) -> JWSPublicKey? { keys[kid] }
}
