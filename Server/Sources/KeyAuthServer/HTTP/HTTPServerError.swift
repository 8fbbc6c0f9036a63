import Glibc

/// A transport failure: the daemon could not start on its address, and why, in words an
/// operator can act on.
///
/// libmicrohttpd reports a failed start without the system's reason, so the address is bound
/// once more the way it binds it (``ListenProbe``) and that error is described: a port another
/// process has, an address this machine does not have, a privileged port.
package struct HTTPServerError: Error, Sendable, CustomStringConvertible {
    /// Why the address cannot be listened on.
    package enum Reason: Sendable, Equatable {
        /// Another socket listens on the port (`EADDRINUSE`).
        case inUse
        /// No interface of this machine has the address (`EADDRNOTAVAIL`).
        case notLocal
        /// A port below 1024, for a process without the capability to bind one (`EACCES`).
        case privilegedPort
        /// Anything else: the system's text, or why the daemon failed on a bindable address.
        case other(String)
    }

    /// The address that could not be listened on.
    package let address: ListenAddress
    /// Why.
    package let reason: Reason
    /// The option that chooses the address, named in the advice.
    package var flag = "--listen"
    /// What the listener is for, when it is not the service itself (`metrics`).
    package var purpose: String?

    /// An error for `address`.
    package init(address: ListenAddress, reason: Reason) {
        self.address = address
        self.reason = reason
    }

    /// One line: the address, the reason and what to do.
    package var message: String {
        let port = address.port
        let subject = "cannot listen on \(address)" + (purpose.map { " for \($0)" } ?? "")
        // `--metrics-listen off` is a way out too; `--listen` has none.
        let off = flag == "--listen" ? "" : ", or \(flag) off"
        switch reason {
        case .inUse:
            return "\(subject): another process listens on port \(port) (`ss -ltnp 'sport = :\(port)'` shows which); "
                + "stop it, or pass \(flag) HOST:PORT with a free port\(off)"
        case .notLocal:
            let everywhere = address.isIPv6 ? "[::]:\(port)" : "0.0.0.0:\(port)"
            return "\(subject): \(address.host) is not an address of this machine (`ip -brief address` lists them); "
                + "pass \(flag) with one of them, or \(everywhere) for all\(off)"
        case .privilegedPort:
            return "\(subject): a port below 1024 needs root or the capability CAP_NET_BIND_SERVICE; pass \(flag) "
                + "with a port from 1024 (behind a reverse proxy, docs/SERVER.md), or grant the capability\(off)"
        case .other(let text):
            return "\(subject): \(text)"
        }
    }

    package var description: String { message }
}

/// Binds an address once, as libmicrohttpd does, to learn why it could not.
enum ListenProbe {
    /// The reason binding `address` fails now, or `.other` saying the address is bindable (the
    /// daemon then failed for a reason of its own).
    static func reason(_ address: ListenAddress) -> HTTPServerError.Reason {
        let descriptor = socket(
            address.isIPv6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return .other(String(cString: strerror(errno))) }
        defer { close(descriptor) }
        // libmicrohttpd's options on POSIX: SO_REUSEADDR, and IPv6 only for an IPv6 address.
        var one: Int32 = 1
        _ = setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        if address.isIPv6 {
            _ = setsockopt(descriptor, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, socklen_t(MemoryLayout<Int32>.size))
        }
        let length = socklen_t(address.isIPv6 ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size)
        let bound = address.withSocketAddress { bind(descriptor, $0, length) }
        let number = errno
        guard bound != 0 else {
            return .other("the HTTP daemon did not start, though the address can be bound")
        }
        switch number {
        case EADDRINUSE: return .inUse
        case EADDRNOTAVAIL: return .notLocal
        case EACCES where address.port < 1024: return .privilegedPort
        default: return .other(String(cString: strerror(number)))
        }
    }
}
