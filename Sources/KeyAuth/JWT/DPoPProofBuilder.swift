/// Signs DPoP proofs (RFC 9449 section 4.2) with a device key: one per request, bound to its
/// method and URL, to the access token it presents (`ath`), and to the server's nonce when it
/// asks for one.
///
/// The key signs through ``JWSSigner``, so a key in a file and a key in a TPM sign proofs the
/// same way; the public key travels in the proof's `jwk` header, which the verifier binds to the
/// token's `cnf.jkt`.
public struct DPoPProofBuilder: Sendable {
    /// The key that signs.
    public let signer: any JWSSigner
    /// Its public key, as the proof's `jwk` header carries it.
    public let publicKey: JWK
    /// The clock that sets `iat`.
    public let clock: KeyAuthClock

    /// - Parameters:
    ///   - signer: the device key.
    ///   - publicKey: the same key's public JWK.
    ///   - clock: the time source; tests pass a fixed one.
    public init(signer: any JWSSigner, publicKey: JWK, clock: KeyAuthClock = .system) {
        self.signer = signer
        self.publicKey = publicKey
        self.clock = clock
    }

    /// A builder for a device key in a file.
    public init(key: RSAPrivateKey, clock: KeyAuthClock = .system) {
        self.init(signer: key, publicKey: key.publicKey.jwk, clock: clock)
    }

    /// A proof for a request of `method` to `url`.
    ///
    /// - Parameters:
    ///   - method: the request's HTTP method (`htm`).
    ///   - url: the request's URL (`htu`, without query and fragment).
    ///   - accessToken: the token the request presents (adds `ath`); nil at a token endpoint.
    ///   - nonce: the server's last `DPoP-Nonce`, when it asked for one.
    /// - Returns: the compact JWS, for the request's `DPoP` header.
    /// - Throws: the signer's errors; `.invalidArgument` for a URL that is not absolute http(s).
    public func proof(method: String, url: String, accessToken: String? = nil, nonce: String? = nil)
        throws(KeyAuthError) -> String
    {
        guard DPoPProofVerifier.normalizedURL(url) != nil else {
            throw KeyAuthError(.invalidArgument, "a DPoP proof needs an absolute http:// or https:// URL")
        }
        var header: [UInt8] = []
        JSONText.appendRaw(
            "{\"typ\":\"\(DPoPProofVerifier.proofType)\",\"alg\":\"\(signer.algorithm.rawValue)\",", to: &header)
        JSONText.appendRaw("\"jwk\":", to: &header)
        publicKey.jsonValue().write(to: &header)
        JSONText.appendRaw("}", to: &header)
        var claims = JWTClaims()
        claims.set("jti", string: Base64URL.encode(try CryptoPrimitives.randomBytes(count: 16)))
        claims.set("htm", string: method)
        // Without query or fragment, as RFC 9449 section 4.2 asks.
        claims.set("htu", string: String(url.prefix { $0 != "?" && $0 != "#" }))
        claims.set("iat", integer: clock.seconds)
        if let accessToken { claims.set("ath", string: try DPoPProofVerifier.accessTokenHash(accessToken)) }
        if let nonce { claims.set("nonce", string: nonce) }
        return try JWTBuilder.sign(headerJSON: header, payloadJSON: claims.serializedBytes(), key: signer)
    }
}
