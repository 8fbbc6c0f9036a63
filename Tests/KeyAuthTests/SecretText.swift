import KeyAuth

/// Stands in for the key store: accepts only `2468`, as decrypting the key with it would.
func decrypt(_ pin: SecretBytes) throws(KeyAuthError) -> Int {
    guard pin.constantTimeEquals(SecretBytes(utf8: "2468")) else {
        throw KeyAuthError(.wrongPIN, "wrong PIN")
    }
    return 42
}

/// The text of a secret, for comparing answers in tests.
func text(_ secret: SecretBytes) -> String {
    secret.withUnsafeBytes { String(decoding: $0, as: UTF8.self) }
}
