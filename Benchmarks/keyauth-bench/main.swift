import Foundation
import KeyAuth
import KeyAuthServer

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

// keyauth-bench: release-mode measurements that back the figures in docs/BENCHMARKS.md.
//
//   swift run -c release keyauth-bench rsa [--seconds N]
//   swift run -c release keyauth-bench pin [--guesses N] [--scrypt-p P,P,...]
//
// `rsa` times RS256 signing and verification of a typical device assertion with the library,
// and RSA key generation, then runs `openssl speed` for the same key sizes in the same
// invocation, so that both are measured on the same machine under the same load.
//
//   keyauth-bench timing --server http://127.0.0.1:PORT [--code CODE] [--pairs N]
//
// `timing` compares refused logins of a registered and an unknown key (TimingBenchmark.swift);
// Benchmarks/timing/run.sh starts the server for it.
//
//   swift run -c release keyauth-bench login-path [--logins N] [--alg RS256|ES256] [--log text|json]
//
// `login-path` splits the CPU time of a login inside the server, without sockets, into the RSA
// operations and the rest (LoginPathBenchmark.swift); `--log` writes each login's log line, in
// that format, to /dev/null.
//
//   keyauth-bench load-prepare --out FILE --issuer URL [--devices N] [--assertions N]
//                              [--keys-out FILE] [--keys-in FILE] [--seconds S] [--threads N]
//                              [--lifetime S] [SERVER...]
//
// `load-prepare` registers RSA-2048 device keys with each SERVER and pre-signs unique
// assertions for the wrk script of Benchmarks/load (run.sh, run-postgres.sh); `--keys-out` keeps
// the keys so that a later call with `--keys-in` signs fresh assertions for them. `--seconds S`
// signs for S seconds on `--threads N` threads (default: every core) and writes what it made
// (Benchmarks/soak/run.sh signs each round's assertions during the round before). `--lifetime S`
// sets the assertions' lifetime (default 280 s: long enough to sign ahead of a long run).
//
// `pin` times what an offline guesser pays per PIN for a copied key file: one decryption with a
// wrong PIN, for the scrypt encryption keyauth writes and for the PBKDF2 it wrote before,
// alternating between them so that both see the same machine. `--scrypt-p` adds other scrypt
// parallelisation values, to choose the standard one.
//
//   swift run -c release keyauth-bench rate-limiter [--addresses N] [--threads N]
//
// `rate-limiter` fills the server's per-address limiter to its bound (100,000 addresses by
// default) and then times counting new addresses, each of which evicts the stalest one: the
// cost an attacker with many addresses imposes on every login.
//
//   KEYAUTH_TPM_TCTI=swtpm:host=127.0.0.1,port=P keyauth-bench tpm [--signatures N] [--generations N]
//
// `tpm` times TPM-held keys next to file keys (TPMBenchmark.swift); Benchmarks/tpm/run.sh starts
// a software TPM for it.

struct Rate {
    let operations: Int
    let seconds: Double
    var perSecond: Double { Double(operations) / seconds }
}

func measure(seconds: Double, _ body: () throws -> Void) rethrows -> Rate {
    let clock = ContinuousClock()
    let start = clock.now
    var operations = 0
    var elapsed = 0.0
    while elapsed < seconds {
        for _ in 0..<16 { try body() }
        operations += 16
        let duration = clock.now - start
        elapsed = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
    return Rate(operations: operations, seconds: elapsed)
}

/// Runs `openssl speed` and returns sign/s and verify/s per key size.
func opensslSpeed(bits: [Int], seconds: Int) -> [Int: (sign: Double, verify: Double)] {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["openssl", "speed", "-seconds", String(seconds)] + bits.map { "rsa\($0)" }
    let output = Pipe()
    process.standardOutput = output
    process.standardError = FileHandle.nullDevice
    do { try process.run() } catch { return [:] }
    let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    var rates: [Int: (sign: Double, verify: Double)] = [:]
    for line in text.split(separator: "\n") where line.hasPrefix("rsa ") {
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        // rsa 2048 bits 0.000667s 0.000019s   1500.0  52000.0
        guard fields.count >= 7, let size = Int(fields[1]), let sign = Double(fields[5]), let verify = Double(fields[6])
        else { continue }
        rates[size] = (sign, verify)
    }
    return rates
}

func rsaBenchmark(seconds: Double) throws {
    let sizes = [2048, 3072]
    print("RS256 with the KeyAuth library vs `openssl speed` (single thread, \(seconds) s per figure)")
    print("key    library sign/s  openssl sign/s  ratio   library verify/s  openssl verify/s  ratio")
    var library: [Int: (sign: Double, verify: Double)] = [:]
    for bits in sizes {
        let key = try RSAPrivateKey.generate(bits: bits)
        let builder = JWTBuilder(key: key, audience: "https://auth.example.test")
        let token = try builder.sign()
        let jws = try CompactJWS(parsing: token)
        let input = jws.signingInput
        let publicKey = key.publicKey
        let sign = try measure(seconds: seconds) { _ = try key.signature(for: input) }
        let verify = measure(seconds: seconds) {
            precondition(jws.isSignatureValid(with: publicKey), "benchmark signature must verify")
        }
        library[bits] = (sign.perSecond, verify.perSecond)
    }
    let openssl = opensslSpeed(bits: sizes, seconds: max(1, Int(seconds.rounded())))
    for bits in sizes {
        guard let mine = library[bits] else { continue }
        let theirs = openssl[bits]
        func ratio(_ a: Double, _ b: Double?) -> String { b.map { String(format: "%.3f", a / $0) } ?? "n/a" }
        print(
            String(
                format: "%-6d %14.1f  %14.1f  %5@   %16.1f  %16.1f  %5@", bits, mine.sign, theirs?.sign ?? 0,
                ratio(mine.sign, theirs?.sign), mine.verify, theirs?.verify ?? 0, ratio(mine.verify, theirs?.verify)))
    }
    print("")
    print("key generation (library, mean of 5):")
    for bits in sizes {
        let clock = ContinuousClock()
        var total = Duration.zero
        for _ in 0..<5 {
            let start = clock.now
            _ = try RSAPrivateKey.generate(bits: bits)
            total += clock.now - start
        }
        print("  RSA-\(bits): \(total / 5)")
    }
}

/// CPU seconds used by the calling thread so far: unlike wall time, it does not count the
/// time other processes on a busy machine hold the cores.
func threadCPUSeconds() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now)
    return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}

func padded(_ text: String, _ width: Int) -> String {
    text + String(repeating: " ", count: max(0, width - text.count))
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return 0 }
    let middle = sorted.count / 2
    return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}

/// Wall time of `openssl pkey` reading `pem` with the right PIN, process start included, or nil
/// when it fails: the file must stay readable by standard tools.
func opensslReadSeconds(_ pem: [UInt8], passphrase: String) -> Double? {
    let file = NSTemporaryDirectory() + "/keyauth-bench-\(getpid()).pem"
    guard FileManager.default.createFile(atPath: file, contents: Data(pem), attributes: [.posixPermissions: 0o600])
    else { return nil }
    defer { try? FileManager.default.removeItem(atPath: file) }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["openssl", "pkey", "-in", file, "-passin", "pass:" + passphrase, "-noout"]
    process.standardOutput = FileHandle.nullDevice
    process.standardError = FileHandle.nullDevice
    let start = ContinuousClock.now
    do { try process.run() } catch { return nil }
    process.waitUntilExit()
    let elapsed = ContinuousClock.now - start
    guard process.terminationStatus == 0 else { return nil }
    return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
}

func option(_ name: String, in arguments: [String]) -> String? {
    guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
    return arguments[index + 1]
}

let arguments = Array(CommandLine.arguments.dropFirst())
var seconds = 3.0
if let index = arguments.firstIndex(of: "--seconds"), index + 1 < arguments.count,
    let value = Double(arguments[index + 1])
{
    seconds = value
}
switch arguments.first {
case "rsa", nil:
    do {
        try rsaBenchmark(seconds: seconds)
    } catch {
        FileHandle.standardError.write(Data("keyauth-bench: \(error)\n".utf8))
        exit(1)
    }
case "pin":
    let guesses = Int(option("--guesses", in: arguments) ?? "") ?? 10
    let extra = (option("--scrypt-p", in: arguments) ?? "").split(separator: ",").compactMap { UInt64($0) }
    do {
        try pinBenchmark(guesses: max(1, guesses), extraScryptP: extra)
    } catch {
        FileHandle.standardError.write(Data("keyauth-bench: \(error)\n".utf8))
        exit(1)
    }
case "rate-limiter":
    rateLimiterBenchmark(
        addresses: Int(option("--addresses", in: arguments) ?? "") ?? AddressRateLimiter.defaultMaximumAddresses,
        threads: Int(option("--threads", in: arguments) ?? "") ?? 4)
case "tpm":
    do {
        try TPMBenchmark(
            connection: TPMConnection.fromEnvironment(),
            signatures: max(1, Int(option("--signatures", in: arguments) ?? "") ?? 50),
            generations: max(1, Int(option("--generations", in: arguments) ?? "") ?? 5)
        ).run()
    } catch {
        FileHandle.standardError.write(Data("keyauth-bench: \(error)\n".utf8))
        exit(1)
    }
case "load-prepare":
    let rest = Array(arguments.dropFirst())
    let flags: Set<String> = [
        "--devices", "--assertions", "--out", "--issuer", "--keys-in", "--keys-out", "--seconds", "--threads",
        "--lifetime",
    ]
    var servers: [String] = []
    var skip = false
    for argument in rest {
        if skip {
            skip = false
        } else if flags.contains(argument) {
            skip = true
        } else {
            servers.append(argument)
        }
    }
    let keysIn = option("--keys-in", in: rest)
    guard let output = option("--out", in: rest), let issuer = option("--issuer", in: rest),
        !servers.isEmpty || keysIn != nil
    else {
        FileHandle.standardError.write(
            Data(
                ("usage: keyauth-bench load-prepare --out FILE --issuer URL [--devices N] [--assertions N] "
                    + "[--keys-out FILE] [--keys-in FILE] [--seconds S] [--threads N] [--lifetime S] [SERVER...]\n")
                    .utf8))
        exit(64)
    }
    do {
        try loadPrepare(
            devices: Int(option("--devices", in: rest) ?? "") ?? 200,
            count: Int(option("--assertions", in: rest) ?? "") ?? 100_000, issuer: issuer, servers: servers,
            output: output, keysIn: keysIn, keysOut: option("--keys-out", in: rest),
            seconds: option("--seconds", in: rest).flatMap { Double($0) },
            threads: Int(option("--threads", in: rest) ?? "") ?? ProcessInfo.processInfo.activeProcessorCount,
            lifetime: Int64(option("--lifetime", in: rest) ?? "") ?? 280)
    } catch {
        FileHandle.standardError.write(Data("keyauth-bench: \(error)\n".utf8))
        exit(1)
    }
case "login-path":
    do {
        let name = option("--alg", in: arguments) ?? "RS256"
        guard let algorithm = JWSAlgorithm(rawValue: name), algorithm == .rs256 || algorithm == .es256 else {
            throw KeyAuthError(.invalidArgument, "--alg must be RS256 or ES256, not \(name)")
        }
        let logFormat = try option("--log", in: arguments).map { name throws(KeyAuthError) in
            guard let format = LogFormat(rawValue: name) else {
                throw KeyAuthError(.invalidArgument, "--log must be text or json, not \(name)")
            }
            return format
        }
        try LoginPathBenchmark(
            logins: max(100, Int(option("--logins", in: arguments) ?? "") ?? 5000), tokenAlgorithm: algorithm,
            logFormat: logFormat
        ).run()
    } catch {
        FileHandle.standardError.write(Data("keyauth-bench: \(error)\n".utf8))
        exit(1)
    }
case "timing":
    let rest = Array(arguments.dropFirst())
    guard let server = option("--server", in: rest) else {
        FileHandle.standardError.write(
            Data("usage: keyauth-bench timing --server http://127.0.0.1:PORT [--code CODE] [--pairs N]\n".utf8))
        exit(64)
    }
    do {
        try TimingBenchmark(
            server: server, enrollmentCode: option("--code", in: rest),
            pairs: Int(option("--pairs", in: rest) ?? "") ?? 3000
        ).run()
    } catch {
        FileHandle.standardError.write(Data("keyauth-bench: \(error)\n".utf8))
        exit(1)
    }
default:
    FileHandle.standardError.write(
        Data(
            ("usage: keyauth-bench rsa [--seconds N] | pin [--guesses N] [--scrypt-p P,...] "
                + "| rate-limiter [--addresses N] [--threads N] | load-prepare ... | login-path [--logins N] [--alg RS256|ES256] [--log text|json] "
                + "| timing --server URL ... "
                + "| tpm [--signatures N] [--generations N]\n").utf8))
    exit(64)
}
