import Foundation
import KeyAuth

/// Times TPM-held keys against file keys: key generation, and what one login costs.
///
/// A login with a TPM key opens the TPM through OpenSSL's tpm2 provider, has the TPM recreate its
/// primary key, loads the blob under it, signs once, and flushes: ``TPMKey/signature(for:pin:on:)``.
/// The breakdown separates that load from the signature itself. A login with a PIN-protected file
/// key decrypts the key (scrypt) and signs in software. Every figure is a median, since a software
/// TPM on a shared machine has outliers.
struct TPMBenchmark {
    let connection: TPMConnection
    let signatures: Int
    let generations: Int

    func run() throws {
        let info = try connection.info()
        print("TPM at \(connection.tcti): manufacturer \(info.manufacturer), vendor \"\(info.vendor)\"")
        print("RSA sizes it supports: \(info.rsaKeySizes.map(String.init).joined(separator: ", "))")
        let pin = SecretBytes(utf8: "2468")
        let message = Array(String(repeating: "x", count: 700).utf8)  // a device assertion's signing input
        let sizes = info.rsaKeySizes.filter { $0 <= 3072 }

        print("")
        print("key generation (median of \(generations)):")
        print("key    TPM (tpm2 provider)   file (OpenSSL, in memory)")
        var keys: [Int: TPMKey] = [:]
        for bits in sizes {
            var tpmTimes: [Double] = []
            var fileTimes: [Double] = []
            for _ in 0..<generations {
                tpmTimes.append(try time { keys[bits] = try TPMKey.generate(bits: bits, pin: pin, on: connection) })
                fileTimes.append(try time { _ = try RSAPrivateKey.generate(bits: bits) })
            }
            print(String(format: "%-6d %14.1f ms   %14.1f ms", bits, median(tpmTimes) * 1e3, median(fileTimes) * 1e3))
        }

        print("")
        print("one login's signature (median of \(signatures)):")
        print("key    TPM: open+load+sign   of which sign   file key: scrypt decrypt+sign   of which sign")
        for bits in sizes {
            guard let key = keys[bits] else { continue }
            let fileKey = try RSAPrivateKey.generate(bits: bits)
            let filePEM = try fileKey.pkcs8PEM(pin: pin)
            var login: [Double] = []
            var fileLogin: [Double] = []
            var fileSign: [Double] = []
            let signOnly = try signaturesOnly(key, pin: pin, message: message)
            for _ in 0..<signatures {
                fileSign.append(try time { _ = try fileKey.signature(for: message) })
                login.append(try time { _ = try key.signature(for: message, pin: pin, on: connection) })
                fileLogin.append(
                    try time { _ = try RSAPrivateKey(pemRepresentation: filePEM, pin: pin).signature(for: message) })
            }
            print(
                String(
                    format: "%-6d %16.1f ms   %10.1f ms   %24.1f ms   %10.2f ms", bits, median(login) * 1e3,
                    median(signOnly) * 1e3, median(fileLogin) * 1e3, median(fileSign) * 1e3))
        }
    }

    /// Signs with one loaded key, `signatures` times; the key, and its connection, are released
    /// on return, before anything else connects (a software TPM serves one connection at a time).
    private func signaturesOnly(_ key: TPMKey, pin: SecretBytes, message: [UInt8]) throws -> [Double] {
        let loaded = try key.loadForSigning(pin: pin, on: connection)
        return try (0..<signatures).map { _ in try time { _ = try loaded.signature(for: message) } }
    }

    private func time(_ body: () throws -> Void) throws -> Double {
        let clock = ContinuousClock()
        let start = clock.now
        try body()
        return (clock.now - start) / .seconds(1)
    }
}
