import Foundation
import KeyAuth

/// Looks for an RSA key's prime factors in bytes that should not hold them, such as a TPM key
/// blob: a prime lying anywhere in plain text, in either byte order, is found.
public enum RSAPrimeSearch {
    /// How many windows of `bytes` (either byte order) of the size of one prime divide the
    /// modulus of `key`: at least 2 for a private key file, 0 for a blob that holds no prime.
    ///
    /// - Throws: ``TestFailure`` when python3 fails or prints no number.
    public static func factorsFound(in bytes: [UInt8], of key: RSAPublicKey) throws -> Int {
        let script = """
            import sys
            der = bytes.fromhex(sys.argv[1]); n = int(sys.argv[2], 16); size = int(sys.argv[3])
            found = 0
            for i in range(len(der) - size + 1):
                for window in (der[i:i + size], der[i:i + size][::-1]):
                    x = int.from_bytes(window, "big")
                    if 1 < x < n and n % x == 0:
                        found += 1
            print(found)
            """
        let result = try ExternalCommand.run([
            "python3", "-c", script, hexString(bytes), hexString(key.modulus), String(key.bits / 16),
        ])
        guard result.status == 0, let found = Int(result.output.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw TestFailure("the prime search failed: \(result.errorOutput)")
        }
        return found
    }

    /// The DER inside a PEM (the base64 lines between its BEGIN and END lines).
    public static func der(ofPEM pem: [UInt8]) throws -> [UInt8] {
        let body = String(decoding: pem, as: UTF8.self).split(separator: "\n").filter { !$0.hasPrefix("-----") }
        guard let data = Data(base64Encoded: body.joined()) else { throw TestFailure("not PEM") }
        return Array(data)
    }
}
