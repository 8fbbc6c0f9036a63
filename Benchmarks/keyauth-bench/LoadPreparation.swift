import Foundation
import KeyAuth
import KeyAuthServer

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

// `keyauth-bench load-prepare`: device keys registered with the servers and assertions signed
// ahead for the wrk scripts (main.swift).

/// Registers `devices` RSA-2048 keys with every server in `servers` (one user each, so all are
/// active) and writes `count` unique pre-signed assertions, one per line, for the wrk script.
///
/// With `keysIn` the device keys are read from that file (written by an earlier run with
/// `keysOut`) instead of generated, so that a benchmark registers its keys once and signs a
/// fresh set of assertions (new `jti`s) for each of its rounds. With `seconds` it signs for that
/// long on `threads` threads and writes what it made (at most `count`): the soak benchmark signs
/// the next round's assertions while the current round runs, as many as the machine manages.
func loadPrepare(
    devices: Int, count: Int, issuer: String, servers: [String], output: String, keysIn: String?,
    keysOut: String?, seconds: Double? = nil, threads: Int = ProcessInfo.processInfo.activeProcessorCount,
    lifetime: Int64 = 280
) throws {
    let ready = try keysIn.map(readDeviceKeys) ?? generateDeviceKeys(devices)
    if let keysOut {
        var pems: [UInt8] = []
        for key in ready { pems += try key.pkcs8PEM() }
        // Throwaway benchmark keys, but private keys all the same: readable by the owner only.
        guard
            FileManager.default.createFile(
                atPath: keysOut, contents: Data(pems), attributes: [.posixPermissions: 0o600])
        else { throw KeyAuthError(.invalidArgument, "cannot write \(keysOut)") }
    }
    for server in servers {
        for (index, key) in ready.enumerated() {
            let proof = try JWTBuilder(key: key, audience: issuer).sign()
            let request = RegistrationRequest(
                user: "bench-\(index)", name: "bench", publicKeyPEM: key.publicKey.pemRepresentation, proof: proof)
            let status = try post(server + "/v1/devices", body: request.jsonBody)
            guard status == 201 || status == 200 else {
                throw KeyAuthError(.serverRejected, "registration at \(server) answered \(status)")
            }
        }
    }
    let deadline = seconds.map { ContinuousClock.now + .milliseconds(Int64(($0 * 1000).rounded())) }
    let lines = try signAssertions(
        count: count, keys: ready, issuer: issuer, threads: threads, until: deadline, lifetime: lifetime)
    let text = lines.map { $0 + "\n" }.joined()
    try text.write(toFile: output, atomically: false, encoding: .utf8)
}

/// Up to `count` unique assertions (RS256, `lifetime` seconds, each a new `jti`) for `keys` in
/// turn, signed on `threads` threads, stopping early at `deadline`.
///
/// Each thread signs every `threads`-th index, so the keys take turns whatever the thread count;
/// a bounded thread count leaves the other cores to the server under test.
func signAssertions(
    count: Int, keys: [RSAPrivateKey], issuer: String, threads: Int, until deadline: ContinuousClock.Instant?,
    lifetime: Int64
) throws -> [String] {
    let width = max(1, threads)
    let shares = (0..<width).map { _ in Box<(signed: [String], failed: Bool)>() }
    DispatchQueue.concurrentPerform(iterations: width) { thread in
        var signed: [String] = []
        var failed = false
        var index = thread
        while index < count, deadline.map({ ContinuousClock.now < $0 }) ?? true {
            guard
                let assertion = try? JWTBuilder(key: keys[index % keys.count], audience: issuer, lifetime: lifetime)
                    .sign()
            else {
                failed = true
                break
            }
            signed.append(assertion)
            index += width
        }
        shares[thread].value = (signed, failed)
    }
    guard shares.allSatisfy({ $0.value?.failed == false }) else {
        throw KeyAuthError(.cryptoFailed, "signing failed")
    }
    return shares.flatMap { $0.value?.signed ?? [] }
}

/// `count` new RSA-2048 device keys, generated on every core.
func generateDeviceKeys(_ count: Int) throws -> [RSAPrivateKey] {
    let keys = (0..<count).map { _ in Box<RSAPrivateKey>() }
    DispatchQueue.concurrentPerform(iterations: count) { index in
        keys[index].value = try? RSAPrivateKey.generate(bits: 2048)
    }
    let ready = keys.compactMap(\.value)
    guard ready.count == count, count > 0 else { throw KeyAuthError(.cryptoFailed, "key generation failed") }
    return ready
}

/// The device keys of a `--keys-out` file: concatenated unencrypted PKCS#8 PEMs.
func readDeviceKeys(_ path: String) throws -> [RSAPrivateKey] {
    let text = try String(contentsOfFile: path, encoding: .utf8)
    let end = "-----END PRIVATE KEY-----"
    let keys = try text.components(separatedBy: end).dropLast().map {
        try RSAPrivateKey(pemRepresentation: Array(($0 + end + "\n").utf8))
    }
    guard !keys.isEmpty else { throw KeyAuthError(.invalidArgument, "no keys in \(path)") }
    return keys
}

/// A mutable slot for results written from `concurrentPerform`, one index per thread.
final class Box<Value>: @unchecked Sendable {
    var value: Value?
}

/// A blocking JSON POST; returns the status code.
func post(_ url: String, body: [UInt8]) throws -> Int {
    guard let target = URL(string: url) else { throw KeyAuthError(.invalidArgument, "bad URL \(url)") }
    var request = URLRequest(url: target)
    request.httpMethod = "POST"
    request.httpBody = Data(body)
    request.setValue("application/json", forHTTPHeaderField: "Content-Type")
    let done = DispatchSemaphore(value: 0)
    let status = Box<Int>()
    URLSession.shared.dataTask(with: request) { _, response, _ in
        status.value = (response as? HTTPURLResponse)?.statusCode
        done.signal()
    }.resume()
    done.wait()
    return status.value ?? 0
}
