import Glibc
import KeyAuth

/// Where the server writes its log lines.
///
/// One line per request (method, path, status, duration) and one per internal failure. Callers
/// never pass tokens, keys or enrollment codes; request paths are sanitised here.
public protocol ServerLog: Sendable {
    /// Writes one complete line (without the newline).
    func write(line: String)
}

extension ServerLog {
    /// Logs one answered request.
    func request(method: String, path: String, status: Int, milliseconds: Double) {
        let rounded = (milliseconds * 10).rounded() / 10
        write(
            line:
                "\(RFC3339.string(fromSeconds: ServerClock.now())) \(Self.sanitise(method, limit: 16)) \(Self.sanitise(path, limit: 128)) \(status) \(rounded)ms"
        )
    }

    /// Logs an internal failure (storage, bug). `detail` must hold no client secret.
    func error(_ detail: String) {
        write(
            line:
                "\(RFC3339.string(fromSeconds: ServerClock.now())) error: \(Self.sanitise(detail, limit: 512, allowSpaces: true))"
        )
    }

    /// Printable ASCII only and bounded, so a client cannot inject lines or flood the log.
    static func sanitise(_ text: String, limit: Int, allowSpaces: Bool = false) -> String {
        let allowed: ClosedRange<UInt32> = allowSpaces ? 0x20...0x7E : 0x21...0x7E
        var output = ""
        for scalar in text.unicodeScalars.prefix(limit) {
            output.unicodeScalars.append(allowed.contains(scalar.value) ? scalar : "?")
        }
        if text.unicodeScalars.count > limit { output += "..." }
        return output.isEmpty ? "-" : output
    }
}

/// Writes lines to standard error, each in one `write(2)` where the kernel takes it whole, so that
/// lines from different worker threads do not interleave.
public struct StandardErrorLog: ServerLog {
    /// Creates the log.
    public init() {}

    public func write(line: String) {
        var bytes = Array(line.utf8)
        bytes.append(0x0A)
        DescriptorIO.writeAll(STDERR_FILENO, bytes: bytes)
    }
}

/// Drops every line, for tests and quiet commands.
public struct SilentLog: ServerLog {
    /// Creates the log.
    public init() {}

    public func write(line: String) {}
}
