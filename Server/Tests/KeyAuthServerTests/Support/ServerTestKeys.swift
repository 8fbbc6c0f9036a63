import Foundation
import KeyAuth
import KeyAuthTestSupport
import Synchronization

/// RSA-2048 keys shared by the server tests, made once per process: generation is the slowest
/// step of most tests, and each test has its own database, so sharing keys changes nothing
/// the tests check.
enum ServerTestKeys {
    private static let cache = Mutex<[String: RSAPrivateKey]>([:])

    /// The key named `name`, generated on first use.
    static func key(_ name: String) throws -> RSAPrivateKey {
        if let key = cache.withLock({ $0[name] }) { return key }
        let key = try RSAPrivateKey.generate(bits: 2048)
        return cache.withLock { cache in
            if let existing = cache[name] { return existing }
            cache[name] = key
            return key
        }
    }

    /// The server signing key's PKCS#8 PEM, shared so that each test server skips generation.
    static func serverKeyPEM() throws -> [UInt8] {
        try key("server").pkcs8PEM()
    }

    /// A private key made by the `openssl` command with options our own generator refuses
    /// (1024 bits, exponent 3): the registration policy must reject such keys.
    static func opensslKey(bits: Int, exponent: Int = 65537) throws -> RSAPrivateKey {
        let name = "openssl-\(bits)-\(exponent)"
        if let key = cache.withLock({ $0[name] }) { return key }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keyauth-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("key.pem")
        let generated = try ExternalCommand.run([
            "openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:\(bits)", "-pkeyopt",
            "rsa_keygen_pubexp:\(exponent)", "-out", file.path,
        ])
        guard generated.status == 0 else { throw TestFailure("openssl genpkey failed: \(generated.errorOutput)") }
        let key = try RSAPrivateKey(pemRepresentation: Array(try Data(contentsOf: file)))
        cache.withLock { $0[name] = key }
        return key
    }
}

/// The test support's failure, by the name the server's tests have always used.
typealias TestFailure = KeyAuthTestSupport.TestFailure
