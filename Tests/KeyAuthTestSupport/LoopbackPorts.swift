import Foundation

/// Loopback ports for servers that must be told their port before they start (a software TPM,
/// Apache with a redirect URI registered first, sshd).
///
/// A port is chosen below the kernel's ephemeral range: a port from that range, even one free a
/// moment ago, can be taken at any moment by another test's listener on port 0 or as the source
/// port of a client's connection, and the server started on it then fails to bind.
public enum LoopbackPorts {
    /// A port P such that P up to P + `count` - 1 (`count` 1 or 2) were all free a moment ago,
    /// below the ephemeral range.
    public static func freeBelowEphemeralRange(count: UInt16 = 1) -> UInt16 {
        let count = min(max(count, 1), 2)
        let ports = belowEphemeralRange()
        for _ in 0..<50 {
            let port = UInt16.random(in: ports)
            if (port..<(port + count)).allSatisfy(isFree) { return port }
        }
        return UInt16.random(in: ports)
    }

    /// Whether a connection to 127.0.0.1:`port` is accepted now: a test server that has started.
    public static func canConnect(port: UInt16) -> Bool {
        withLoopbackSocket(port) { connect($0, $1, $2) == 0 }
    }

    /// 20000 up to just below the first ephemeral port (`ip_local_port_range`), or up to 32766
    /// when that cannot be read or leaves too little room. The top leaves one port spare for a
    /// pair. The kernel's default range starts at 32768.
    private static func belowEphemeralRange() -> ClosedRange<UInt16> {
        let text = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)) ?? ""
        let first = text.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).first.flatMap { UInt16($0) }
        guard let first, first > 21_000 else { return 20_000...32_766 }
        return 20_000...(first - 2)
    }

    private static func isFree(_ port: UInt16) -> Bool {
        withLoopbackSocket(port) { bind($0, $1, $2) == 0 }
    }

    /// Runs `body` with a fresh TCP socket and the address 127.0.0.1:`port`; closes the socket.
    private static func withLoopbackSocket(
        _ port: UInt16, _ body: (Int32, UnsafePointer<sockaddr>, socklen_t) -> Bool
    ) -> Bool {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                body(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
    }
}
