import KeyAuth

/// A service's registry of device keys: here one key, known in advance.
struct KeyRegistry: DeviceKeyDirectory {
    let keys: [String: RSAPublicKey]

    func key(for keyID: String) throws(KeyAuthError) -> RSAPublicKey {
        guard let key = keys[keyID] else { throw KeyAuthError(.keyNotFound, "no device key \(keyID)") }
        return key
    }

    func publicKey(forKeyID keyID: String) async throws(KeyAuthError) -> RSAPublicKey? {
        keys[keyID]
    }
}

/// Remembers accepted `jti` values in memory; a real service uses its database's unique key.
actor MemoryReplayCache: JWTReplayCache {
    private var seen: Set<String> = []

    func claim(jwtID: String, keyID: String, expiresAt: Int64) async throws(KeyAuthError) -> Bool {
        seen.insert(keyID + " " + jwtID).inserted
    }
}

// Checks a device assertion as a Linux service would, in one call and in two steps.
do {
    let deviceKey = try RSAPrivateKey.generate(bits: 2048)
    let myKeyDirectory = KeyRegistry(keys: [deviceKey.publicKey.fingerprint: deviceKey.publicKey])
    let myRegistry = myKeyDirectory
    let myReplayCache = MemoryReplayCache()
    let assertion = try JWTBuilder(key: deviceKey, audience: "https://auth.example.com").sign()

    let verifier = DeviceAssertionVerifier(audience: "https://auth.example.com")
    let verified = try await verifier.verify(assertion, keys: myKeyDirectory, replayCache: myReplayCache)

    let parsed = try verifier.parse(assertion)  // structure, header, signature length: no key needed
    let checked = try verifier.verify(parsed, key: try myRegistry.key(for: parsed.keyID))
    print(verified.subject, checked.subject)
} catch {
    print("\(error.code): \(error.message)")
}
