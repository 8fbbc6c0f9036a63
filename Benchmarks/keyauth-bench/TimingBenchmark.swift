import Foundation
import Glibc
import KeyAuth

/// Measures whether a refused login takes as long for a registered key as for an unknown one
/// (the timing probe of the security review): registers an RSA-3072 key, then alternates logins
/// with a bad signature for that key and with an equally long signature for an unknown key, on
/// one keep-alive connection, and prints the median round trip of each.
///
/// Both assertions are refused; only their cost may differ. Alternating puts both under the same
/// load, and medians ignore the outliers a shared machine produces.
struct TimingBenchmark {
    let server: String
    let enrollmentCode: String?
    let pairs: Int

    func run() throws {
        guard let url = URL(string: server), let host = url.host, let port = url.port.flatMap(UInt16.init) else {
            throw KeyAuthError(.invalidArgument, "--server must be http://HOST:PORT")
        }
        let registered = try RSAPrivateKey.generate(bits: 3072)
        let unknown = try RSAPrivateKey.generate(bits: 3072)
        try register(registered)

        let issuer = server
        let registeredAssertion = try Self.withBadSignature(
            JWTBuilder(key: registered, audience: issuer, lifetime: 300).sign())
        let unknownAssertion = try Self.withBadSignature(
            JWTBuilder(key: unknown, audience: issuer, lifetime: 300).sign())
        let connection = try BenchConnection(host: host, port: port)
        let registeredRequest = Self.loginRequest(registeredAssertion, host: host)
        let unknownRequest = Self.loginRequest(unknownAssertion, host: host)

        for _ in 0..<max(pairs / 10, 50) {
            _ = try connection.exchange(registeredRequest)
            _ = try connection.exchange(unknownRequest)
        }
        var registeredTimes: [Double] = []
        var unknownTimes: [Double] = []
        registeredTimes.reserveCapacity(pairs)
        unknownTimes.reserveCapacity(pairs)
        for index in 0..<pairs {
            // Which goes first alternates too, so that neither always follows the other.
            let order = index.isMultiple(of: 2) ? [true, false] : [false, true]
            for isRegistered in order {
                let (status, seconds) = try connection.exchange(isRegistered ? registeredRequest : unknownRequest)
                guard status == 400 else {
                    throw KeyAuthError(.serverRejected, "a refused login answered \(status), not 400 invalid_grant")
                }
                if isRegistered { registeredTimes.append(seconds) } else { unknownTimes.append(seconds) }
            }
        }
        let registeredMedian = Self.median(registeredTimes) * 1e6
        let unknownMedian = Self.median(unknownTimes) * 1e6
        print(
            "refused logins, RSA-3072 key, 384-byte signatures, \(pairs) alternating pairs, one keep-alive connection")
        print(String(format: "  registered kid, bad signature  median %8.1f µs", registeredMedian))
        print(String(format: "  unknown kid                    median %8.1f µs", unknownMedian))
        print(String(format: "  difference (registered - unknown)     %+8.1f µs", registeredMedian - unknownMedian))
    }

    /// Registers `key` for the user `timing`, with the enrollment code when one was given.
    private func register(_ key: RSAPrivateKey) throws {
        let request = RegistrationRequest(
            user: "timing", name: "timing-benchmark", publicKeyPEM: key.publicKey.pemRepresentation,
            proof: try JWTBuilder(key: key, audience: server).sign(), enrollmentCode: enrollmentCode)
        let status = try post(server + "/v1/devices", body: request.jsonBody)
        guard status == 201 else { throw KeyAuthError(.serverRejected, "registration answered \(status)") }
    }

    /// `token` with the last bit of its signature flipped: still below the modulus, so the
    /// server does a full verification and refuses it.
    static func withBadSignature(_ token: String) throws -> String {
        guard let dot = token.lastIndex(of: "."), var signature = Base64URL.decode(token[token.index(after: dot)...])
        else { throw KeyAuthError(.invalidArgument, "not a compact JWS") }
        signature[signature.count - 1] ^= 1
        return token[...dot] + Base64URL.encode(signature)
    }

    static func loginRequest(_ assertion: String, host: String) -> [UInt8] {
        let body = FormURLEncoding.encode(["grant_type": OAuthGrantType.jwtBearer.rawValue, "assertion": assertion])
        return Array(
            ("POST /oauth/token HTTP/1.1\r\nHost: \(host)\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                + "Content-Length: \(body.utf8.count)\r\n\r\n" + body).utf8)
    }

    static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        guard !sorted.isEmpty else { return 0 }
        return sorted.count.isMultiple(of: 2)
            ? (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2 : sorted[sorted.count / 2]
    }
}

/// One keep-alive HTTP/1.1 connection that sends a request and reads the response whole
/// (headers, then `Content-Length` bytes), timing the round trip.
final class BenchConnection {
    private let descriptor: Int32
    private var buffer: [UInt8] = []

    init(host: String, port: UInt16) throws {
        descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw KeyAuthError(.transportFailed, "socket() failed") }
        var noDelay: Int32 = 1
        setsockopt(descriptor, Int32(IPPROTO_TCP), TCP_NODELAY, &noDelay, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else {
            close(descriptor)
            throw KeyAuthError(.invalidArgument, "the timing benchmark needs a numeric IPv4 host, not \(host)")
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard result == 0 else {
            close(descriptor)
            throw KeyAuthError(.transportFailed, "cannot connect to \(host):\(port)")
        }
    }

    deinit {
        close(descriptor)
    }

    /// Sends `request` and returns the response status and the seconds until its last byte.
    func exchange(_ request: [UInt8]) throws -> (status: Int, seconds: Double) {
        let start = DispatchTime.now().uptimeNanoseconds
        var offset = 0
        while offset < request.count {
            let sent = request[offset...].withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, 0) }
            guard sent > 0 else { throw KeyAuthError(.transportFailed, "send failed") }
            offset += sent
        }
        let separator = Array("\r\n\r\n".utf8)
        var headerEnd: Int?
        while headerEnd == nil {
            headerEnd = Self.find(separator, in: buffer)
            if headerEnd == nil { try fill() }
        }
        guard let headerEnd else { throw KeyAuthError(.transportFailed, "no response") }
        let headers = String(decoding: buffer[..<headerEnd], as: UTF8.self).lowercased()
        let status = Int(headers.split(separator: " ").dropFirst().first ?? "") ?? 0
        var length = 0
        for line in headers.split(separator: "\r\n") where line.hasPrefix("content-length:") {
            length = Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) ?? 0
        }
        let total = headerEnd + separator.count + length
        while buffer.count < total { try fill() }
        buffer.removeFirst(total)
        return (status, Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9)
    }

    private func fill() throws {
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        let count = chunk.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { throw KeyAuthError(.transportFailed, "the server closed the connection") }
        buffer += chunk[..<count]
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for start in 0...(haystack.count - needle.count) where haystack[start] == needle[0] {
            if Array(haystack[start..<(start + needle.count)]) == needle { return start }
        }
        return nil
    }
}
