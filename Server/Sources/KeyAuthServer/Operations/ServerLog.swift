import Glibc
import KeyAuth

/// Where the server writes its log lines.
///
/// One line per request (``RequestLogEntry``) and one per internal failure, as text or as JSON
/// (``LogFormat``). Callers never pass tokens, keys, PINs or enrollment codes; what a client
/// chose (paths, user names) is sanitised or escaped here.
package protocol ServerLog: Sendable {
    /// Writes one complete line (without the newline).
    func write(line: String)
}

/// The shape of log lines (`--log-format`).
package enum LogFormat: String, Sendable, CaseIterable {
    /// `TIME CLIENT METHOD PATH STATUS DURATIONms` then `key=value` fields: for people and grep.
    case text
    /// One JSON object a line, for log shippers that would otherwise parse the text.
    case json
}

/// What the log says about one answered request. Nothing in it is secret: the path, the route,
/// the OAuth error code, and the user and device key ID the server established (never claimed
/// ones), so that a refusal can be traced to who was refused and why.
struct RequestLogEntry: Sendable, Equatable {
    /// The client address, after `--trust-proxy`.
    var client: String
    var method: String
    /// The request path, shortened for unknown routes.
    var path: String
    /// The route's pattern (`/v1/devices/{kid}`), `unknown` for no route.
    var route: String
    var status: Int
    /// The OAuth error code of a refusal (`invalid_grant`), nil on success.
    var error: String?
    /// The user the request acted as or for, when the server established it.
    var user: String?
    /// The device key ID the request was authenticated with or registered, when established.
    var deviceKID: String?
    /// The OAuth client (`client_id`) the request was made by or for, when established: an
    /// authenticated client, a `client_id` found registered, the client of a valid token.
    var clientID: String? = nil
    var milliseconds: Double
}

extension ServerLog {
    /// Logs one answered request.
    func request(_ entry: RequestLogEntry, format: LogFormat, now: Int64 = ServerClock.now()) {
        let time = RFC3339.string(fromSeconds: now)
        let milliseconds = (entry.milliseconds * 10).rounded() / 10
        switch format {
        case .text:
            var fields = [
                time, Self.sanitise(entry.client, limit: 64), Self.sanitise(entry.method, limit: 16),
                Self.sanitise(entry.path, limit: 128), String(entry.status), "\(milliseconds)ms",
                "route=\(entry.route)",
            ]
            if let error = entry.error { fields.append("error=\(Self.sanitise(error, limit: 64))") }
            if let user = entry.user { fields.append("user=\(Self.sanitise(user, limit: 128))") }
            if let kid = entry.deviceKID { fields.append("kid=\(Self.sanitise(kid, limit: 64))") }
            if let clientID = entry.clientID { fields.append("client_id=\(Self.sanitise(clientID, limit: 128))") }
            write(line: fields.joined(separator: " "))
        case .json:
            var object: [String: JSONValue] = [
                "time": .string(time), "client": .string(Self.bounded(entry.client, limit: 64)),
                "method": .string(Self.bounded(entry.method, limit: 16)),
                "path": .string(Self.bounded(entry.path, limit: 128)), "route": .string(entry.route),
                "status": .integer(Int64(entry.status)), "duration_ms": .number(milliseconds),
            ]
            if let error = entry.error { object["error"] = .string(Self.bounded(error, limit: 64)) }
            if let user = entry.user { object["user"] = .string(Self.bounded(user, limit: 128)) }
            if let kid = entry.deviceKID { object["kid"] = .string(Self.bounded(kid, limit: 64)) }
            if let clientID = entry.clientID { object["client_id"] = .string(Self.bounded(clientID, limit: 128)) }
            write(line: JSONValue.object(object).serialized(leadingKeys: Self.jsonOrder))
        }
    }

    /// Logs an internal failure (storage, bug). `detail` must hold no client secret.
    func error(_ detail: String, format: LogFormat = .text, now: Int64 = ServerClock.now()) {
        message(detail, level: "error", format: format, now: now)
    }

    /// Logs the end of a failure an operator was told of (`/healthz` passing again), so that
    /// the log says how long it lasted. `detail` must hold no client secret.
    func notice(_ detail: String, format: LogFormat = .text, now: Int64 = ServerClock.now()) {
        message(detail, level: "notice", format: format, now: now)
    }

    /// `TIME LEVEL: MESSAGE`, or a JSON object with `time`, `level` and `message`.
    private func message(_ detail: String, level: String, format: LogFormat, now: Int64) {
        let time = RFC3339.string(fromSeconds: now)
        switch format {
        case .text:
            write(line: "\(time) \(level): \(Self.sanitise(detail, limit: 512, allowSpaces: true))")
        case .json:
            let object: JSONValue = .object([
                "time": .string(time), "level": .string(level), "message": .string(Self.bounded(detail, limit: 512)),
            ])
            write(line: object.serialized(leadingKeys: ["time", "level", "message"]))
        }
    }

    /// The members of a JSON request line in the order a reader expects them.
    private static var jsonOrder: [String] {
        ["time", "client", "method", "path", "route", "status", "error", "user", "kid", "client_id", "duration_ms"]
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

    /// `text` cut to `limit` scalars; JSON escaping takes care of the rest.
    private static func bounded(_ text: String, limit: Int) -> String {
        guard text.unicodeScalars.count > limit else { return text }
        var output = String.UnicodeScalarView(text.unicodeScalars.prefix(limit))
        output.append(contentsOf: "...".unicodeScalars)
        return String(output)
    }
}

/// Writes lines to standard error, each in one `write(2)` where the kernel takes it whole, so that
/// lines from different worker threads do not interleave.
package struct StandardErrorLog: ServerLog {
    /// Creates the log.
    package init() {}

    package func write(line: String) {
        var bytes = Array(line.utf8)
        bytes.append(0x0A)
        DescriptorIO.writeAll(STDERR_FILENO, bytes: bytes)
    }
}

/// Drops every line, for tests and quiet commands.
package struct SilentLog: ServerLog {
    /// Creates the log.
    package init() {}

    package func write(line: String) {}
}
