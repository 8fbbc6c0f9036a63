/// How a PIN turns into the key that encrypts a private key file: PKCS#8 PBES2 (RFC 8018) with
/// AES-256-CBC, and a key derivation whose cost is what an offline guesser pays per PIN.
///
/// Someone who copies a key file can try PINs without the attempt counter; each guess costs one
/// key derivation. PBKDF2 costs only CPU time, which GPUs and many cores buy cheaply; scrypt also
/// needs its memory for every guess, so guesses do not parallelise as cheaply.
public struct PINKeyEncryption: Sendable, Hashable, CustomStringConvertible {
    /// The key derivation function and its cost parameters.
    public enum KeyDerivation: Sendable, Hashable {
        /// scrypt (RFC 7914) with cost `n` (a power of two), block size `r` and
        /// parallelisation `p`: each guess needs `128 * r * n` bytes and time growing with `n * r * p`.
        case scrypt(n: UInt64, r: UInt64, p: UInt64)
        /// PBKDF2 with HMAC-SHA256: the format keyauth wrote before scrypt, still read.
        case pbkdf2HMACSHA256(iterations: Int)
    }

    /// The key derivation.
    public let keyDerivation: KeyDerivation

    /// Creates a description of an encryption.
    public init(_ keyDerivation: KeyDerivation) {
        self.keyDerivation = keyDerivation
    }

    /// What new and re-encrypted key files get: scrypt with N = 2^14, r = 8, p = 16.
    ///
    /// N and r are as large as OpenSSL 3.0 allows: its PKCS#8 reader refuses scrypt parameters
    /// that need more than 32 MiB, and N = 2^15 with r = 8 needs 32 MiB plus a little, so
    /// N = 2^14 (16 MiB a guess) is the most that `openssl pkey` can still read. The cost then
    /// comes from p, chosen so that one guess costs at least 250 ms on the development machine
    /// (2 cores). Measured with `swift run -c release keyauth-bench pin` (one wrong-PIN
    /// decryption, median of 7, CPU time, the machine shared with other builds): 44 ms per unit
    /// of p, so p = 16 costs 0.68 s and p = 8 0.34 s, against 0.20 s for the former PBKDF2 with
    /// 600,000 rounds. `openssl pkey` on the same machine when it was idle read a p = 16 file in
    /// 0.37 s, about 23 ms per unit of p: there p = 8 would fall under 250 ms, so p = 16.
    /// docs/BENCHMARKS.md has the figures.
    public static let standard = PINKeyEncryption(.scrypt(n: 1 << 14, r: 8, p: 16))

    /// The former format: PBKDF2-HMAC-SHA256 with 600,000 rounds (OWASP's 2023 figure). Key
    /// files in it still open, and are re-encrypted with ``standard`` after the next right PIN.
    public static let legacyPBKDF2 = PINKeyEncryption(.pbkdf2HMACSHA256(iterations: 600_000))

    /// Whether a key file may be decrypted with this encryption. The parameters come from the
    /// file, which is the user's to change: a file naming a thousand times the cost would hold
    /// every unlock (the agent's, `sudo`'s) for minutes, and scrypt beyond OpenSSL's 32 MiB could
    /// never be read, its failure looking like a wrong PIN that counts. Twice ``standard``'s time
    /// and its memory are the most keyauth reads; PBKDF2 up to 10 million rounds (16 times
    /// ``legacyPBKDF2``).
    public var isAffordable: Bool {
        guard case .scrypt(let standardN, let standardR, let standardP) = Self.standard.keyDerivation else {
            return false
        }
        switch keyDerivation {
        case .scrypt(let n, let r, let p):
            let memoryLimit = standardN * standardR
            let timeLimit = 2 * memoryLimit * standardP
            // Each factor bounded first (2^17, 2^17, 2^22), so that no product below overflows.
            // scrypt's N is a power of two (RFC 7914 section 2); OpenSSL refuses any other, and
            // that refusal would look like a wrong PIN, counted against the right one.
            guard n > 1, n & (n - 1) == 0, r > 0, p > 0, n <= memoryLimit, r <= memoryLimit, p <= timeLimit else {
                return false
            }
            // OpenSSL needs 128 * r * (p + n + 2) bytes within its 32 MiB: p's blocks count too.
            return n * r <= memoryLimit && n * r * p <= timeLimit && 128 * r * (p + n + 2) <= 32 << 20
        case .pbkdf2HMACSHA256(let iterations):
            return iterations > 0 && iterations <= 10_000_000
        }
    }

    /// `scrypt N=16384 r=8 p=24` or `PBKDF2-HMAC-SHA256 600000 rounds`.
    public var description: String {
        switch keyDerivation {
        case .scrypt(let n, let r, let p): "scrypt N=\(n) r=\(r) p=\(p)"
        case .pbkdf2HMACSHA256(let iterations): "PBKDF2-HMAC-SHA256 \(iterations) rounds"
        }
    }
}
