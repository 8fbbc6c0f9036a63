import Foundation
import KeyAuth

// `keyauth-bench pin`: what an offline guesser pays per PIN for a copied key file (main.swift).

func pinBenchmark(guesses: Int, extraScryptP: [UInt64]) throws {
    let key = try RSAPrivateKey.generate(bits: 3072)
    let pin = SecretBytes(utf8: "correct-pin-4711")
    let wrong = SecretBytes(utf8: "wrong-pin-0000")
    var encryptions = [PINKeyEncryption.standard, .legacyPBKDF2]
    for p in extraScryptP {
        let candidate = PINKeyEncryption(.scrypt(n: 1 << 14, r: 8, p: p))
        if !encryptions.contains(candidate) { encryptions.append(candidate) }
    }
    let files = try encryptions.map { try key.pkcs8PEM(pin: pin, encryption: $0) }
    var wall = [[Double]](repeating: [], count: encryptions.count)
    var cpu = [[Double]](repeating: [], count: encryptions.count)
    func encryption(_ index: Int) -> PINKeyEncryption { encryptions[index] }
    let clock = ContinuousClock()
    for _ in 0..<guesses {
        for (index, pem) in files.enumerated() {
            let startCPU = threadCPUSeconds()
            let start = clock.now
            let outcome = Result { () throws(KeyAuthError) in try RSAPrivateKey(pemRepresentation: pem, pin: wrong) }
            let elapsed = clock.now - start
            wall[index].append(Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
            cpu[index].append(threadCPUSeconds() - startCPU)
            guard case .failure(let error) = outcome, error.code == .wrongPIN else {
                throw KeyAuthError(.cryptoFailed, "a wrong PIN did not fail as wrongPIN with \(encryption(index))")
            }
        }
    }
    print("Cost of one PIN guess against a copied RSA-3072 key file (wrong-PIN decryption, median of \(guesses))")
    print("encryption                               wall s   CPU s   4-digit PINs, 1 core   6-digit PINs, 1 core")
    for (index, encryption) in encryptions.enumerated() {
        let perGuess = median(cpu[index])
        print(
            String(
                format: "%@ %6.3f  %6.3f   %17.1f h   %17.1f d", padded(encryption.description, 40),
                median(wall[index]),
                perGuess, perGuess * 1e4 / 3600, perGuess * 1e6 / 86400))
    }
    print("")
    print("openssl pkey -passin (right PIN, process start included):")
    for (index, encryption) in encryptions.enumerated() {
        let seconds = opensslReadSeconds(files[index], passphrase: "correct-pin-4711")
        print("  \(encryption): " + (seconds.map { String(format: "%.3f s", $0) } ?? "FAILED to read"))
    }
}
