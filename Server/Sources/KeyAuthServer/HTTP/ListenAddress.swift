import Glibc

/// A numeric IP address and port to listen on, parsed from `HOST:PORT` (`127.0.0.1:8088`,
/// `[::1]:8088`, `localhost:8088`).
///
/// Only numeric addresses (and `localhost`) are accepted: a server should not depend on DNS to
/// decide which interface it exposes.
package struct ListenAddress: Sendable, Hashable, CustomStringConvertible {
    /// The address as written, without brackets.
    package let host: String
    /// The port; 0 lets the kernel choose (tests read the bound port back).
    package let port: UInt16
    /// Whether the address is IPv6.
    package let isIPv6: Bool

    /// 127.0.0.1 on `port`.
    package static func loopback(port: UInt16) -> ListenAddress {
        ListenAddress(host: "127.0.0.1", port: port, isIPv6: false)
    }

    private init(host: String, port: UInt16, isIPv6: Bool) {
        self.host = host
        self.port = port
        self.isIPv6 = isIPv6
    }

    /// Parses `HOST:PORT`.
    ///
    /// - Parameter flag: the option the text came from, for messages.
    /// - Throws: ``ServerConfigurationError`` naming the problem.
    package init(parsing text: String, flag: String = "--listen") throws(ServerConfigurationError) {
        var host: Substring
        let portText: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else {
                throw ServerConfigurationError("\(flag): expected [IPv6]:PORT, got \(text)")
            }
            host = text[text.index(after: text.startIndex)..<close]
            portText = text[text.index(close, offsetBy: 2)...]
        } else {
            guard let colon = text.lastIndex(of: ":") else {
                throw ServerConfigurationError("\(flag): expected HOST:PORT, got \(text)")
            }
            host = text[..<colon]
            portText = text[text.index(after: colon)...]
        }
        guard let port = UInt16(portText) else {
            throw ServerConfigurationError("\(flag): \(portText) is not a port number")
        }
        if host.isEmpty { host = "0.0.0.0" }
        if host == "localhost" { host = "127.0.0.1" }
        var v4 = in_addr()
        var v6 = in6_addr()
        if inet_pton(AF_INET, String(host), &v4) == 1 {
            isIPv6 = false
        } else if inet_pton(AF_INET6, String(host), &v6) == 1 {
            isIPv6 = true
        } else {
            throw ServerConfigurationError("\(flag): \(host) is not a numeric IP address")
        }
        self.host = String(host)
        self.port = port
    }

    /// `host:port`, with brackets for IPv6: the form URLs use.
    package var description: String {
        isIPv6 ? "[\(host)]:\(port)" : "\(host):\(port)"
    }

    /// Lends a `sockaddr` for this address to `body`; the pointer must not escape.
    func withSocketAddress<Result>(_ body: (UnsafePointer<sockaddr>) -> Result) -> Result {
        if isIPv6 {
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = port.bigEndian
            _ = inet_pton(AF_INET6, host, &address.sin6_addr)
            return withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1, body) }
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        _ = inet_pton(AF_INET, host, &address.sin_addr)
        return withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1, body) }
    }

    /// The text form of a peer address from the kernel, or nil for other families.
    static func text(of address: UnsafePointer<sockaddr>) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        let family = Int32(address.pointee.sa_family)
        let result: UnsafePointer<CChar>?
        switch family {
        case AF_INET:
            result = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { v4 in
                withUnsafePointer(to: v4.pointee.sin_addr) { inet_ntop(AF_INET, $0, &buffer, socklen_t(buffer.count)) }
            }
        case AF_INET6:
            result = address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { v6 in
                withUnsafePointer(to: v6.pointee.sin6_addr) {
                    inet_ntop(AF_INET6, $0, &buffer, socklen_t(buffer.count))
                }
            }
        default:
            return nil
        }
        guard result != nil else { return nil }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
