import KeyAuth

/// RSA-2048 keys generated once per test process: key generation is the slowest step of most
/// tests, and sharing fixed keys across tests changes nothing they check.
public enum TestKeys {
    public static let first: RSAPrivateKey = generate()
    public static let second: RSAPrivateKey = generate()

    private static func generate() -> RSAPrivateKey {
        do {
            return try RSAPrivateKey.generate(bits: 2048)
        } catch {
            preconditionFailure("RSA key generation failed in tests: \(error)")
        }
    }
}
