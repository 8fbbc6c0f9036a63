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

    /// Writes one complete line of UTF-8 (without the newline): how every request's text line
    /// arrives. The default makes a string of it for ``write(line:)``.
    func write(utf8Line: consuming [UInt8])
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
    package func write(utf8Line: consuming [UInt8]) {
        write(line: String(decoding: utf8Line, as: UTF8.self))
    }

    /// Logs one answered request.
    func request(_ entry: RequestLogEntry, format: LogFormat, now: Int64 = ServerClock.now()) {
        switch format {
        case .text:
            write(utf8Line: Self.textLine(entry, now: now))
        case .json:
            write(utf8Line: Self.jsonLine(entry, now: now))
        }
    }

    /// `TIME CLIENT METHOD PATH STATUS DURATIONms route=ROUTE`, then `error=`, `user=`, `kid=` and
    /// `client_id=` when known, written straight into bytes: formatting the line through strings
    /// cost a login about a tenth of its CPU.
    static func textLine(_ entry: RequestLogEntry, now: Int64) -> [UInt8] {
        var line: [UInt8] = []
        line.reserveCapacity(256)
        let space = UInt8(ascii: " ")
        RFC3339.append(fromSeconds: now, to: &line)
        line.append(space)
        appendSanitised(entry.client, limit: 64, to: &line)
        line.append(space)
        appendSanitised(entry.method, limit: 16, to: &line)
        line.append(space)
        appendSanitised(entry.path, limit: 128, to: &line)
        line.append(space)
        line.append(contentsOf: String(entry.status).utf8)
        line.append(space)
        appendTenths(entry.milliseconds, to: &line)
        line.append(contentsOf: "ms route=".utf8)
        line.append(contentsOf: entry.route.utf8)
        func append(_ name: String, _ value: String?, limit: Int) {
            guard let value else { return }
            line.append(contentsOf: name.utf8)
            appendSanitised(value, limit: limit, to: &line)
        }
        append(" error=", entry.error, limit: 64)
        append(" user=", entry.user, limit: 128)
        append(" kid=", entry.deviceKID, limit: 64)
        append(" client_id=", entry.clientID, limit: 128)
        return line
    }

    /// One JSON object with `time`, `client`, `method`, `path`, `route`, `status`, then `error`,
    /// `user`, `kid` and `client_id` when known, and `duration_ms` last, written straight into
    /// bytes as the text line is.
    static func jsonLine(_ entry: RequestLogEntry, now: Int64) -> [UInt8] {
        var line: [UInt8] = []
        line.reserveCapacity(320)
        JSONText.appendRaw(#"{"time":""#, to: &line)
        RFC3339.append(fromSeconds: now, to: &line)
        line.append(UInt8(ascii: "\""))
        func member(_ name: String, _ value: String?, limit: Int? = nil) {
            guard let value else { return }
            line.append(UInt8(ascii: ","))
            JSONText.appendString(name, to: &line)
            line.append(UInt8(ascii: ":"))
            JSONText.appendString(limit.map { bounded(value, limit: $0) } ?? value, to: &line)
        }
        member("client", entry.client, limit: 64)
        member("method", entry.method, limit: 16)
        member("path", entry.path, limit: 128)
        member("route", entry.route)
        JSONText.appendRaw(#","status":"#, to: &line)
        JSONText.appendInteger(Int64(entry.status), to: &line)
        member("error", entry.error, limit: 64)
        member("user", entry.user, limit: 128)
        member("kid", entry.deviceKID, limit: 64)
        member("client_id", entry.clientID, limit: 128)
        JSONText.appendRaw(#","duration_ms":"#, to: &line)
        // A number that is not finite has no JSON form; a finite one can overflow once in tenths.
        if ((entry.milliseconds * 10).rounded() / 10).isFinite {
            appendTenths(entry.milliseconds, to: &line)
        } else {
            JSONText.appendRaw("null", to: &line)
        }
        line.append(UInt8(ascii: "}"))
        return line
    }

    /// `value` rounded to a tenth, as `Double`'s description writes such a number ("0.3",
    /// "12.0"), from the whole count of tenths; anything that is not a plain duration (negative,
    /// enormous, not a number) through the description itself.
    static func appendTenths(_ value: Double, to line: inout [UInt8]) {
        let tenths = (value * 10).rounded()
        guard tenths.sign == .plus, tenths < 1e12 else {
            line.append(contentsOf: "\(tenths / 10)".utf8)
            return
        }
        let whole = Int64(tenths)
        line.append(contentsOf: String(whole / 10).utf8)
        line.append(UInt8(ascii: "."))
        line.append(UInt8(ascii: "0") + UInt8(whole % 10))
    }

    /// Logs an internal failure (storage, bug). `detail` must hold no client secret.
    func error(_ detail: String, format: LogFormat = .text, now: Int64 = ServerClock.now()) {
        message(detail, level: "error", format: format, now: now)
    }

    /// Logs something an operator should fix before it fails requests (a clock drifting from
    /// the database's). `detail` must hold no client secret.
    func warning(_ detail: String, format: LogFormat = .text, now: Int64 = ServerClock.now()) {
        message(detail, level: "warning", format: format, now: now)
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

    /// Printable ASCII only and bounded, so a client cannot inject lines or flood the log.
    static func sanitise(_ text: String, limit: Int, allowSpaces: Bool = false) -> String {
        var output: [UInt8] = []
        appendSanitised(text, limit: limit, allowSpaces: allowSpaces, to: &output)
        return String(decoding: output, as: UTF8.self)
    }

    /// Appends `text`'s first `limit` Unicode scalars, each printable ASCII one as it is (the
    /// space only with `allowSpaces`) and every other one as one `?`, then `...` when `text` has
    /// more; `-` when that leaves nothing. The scalars are counted by their first UTF-8 byte.
    static func appendSanitised(_ text: String, limit: Int, allowSpaces: Bool = false, to line: inout [UInt8]) {
        let lowest = allowSpaces ? UInt8(ascii: " ") : UInt8(ascii: "!")
        let start = line.count
        var scalars = 0
        for byte in text.utf8 where byte & 0xC0 != 0x80 {
            guard scalars < limit else {
                line.append(contentsOf: "...".utf8)
                break
            }
            scalars += 1
            line.append(byte >= lowest && byte <= UInt8(ascii: "~") ? byte : UInt8(ascii: "?"))
        }
        if line.count == start { line.append(UInt8(ascii: "-")) }
    }

    /// `text` cut to `limit` scalars; JSON escaping takes care of the rest.
    static func bounded(_ text: String, limit: Int) -> String {
        guard text.unicodeScalars.count > limit else { return text }
        var output = String.UnicodeScalarView(text.unicodeScalars.prefix(limit))
        output.append(contentsOf: "...".unicodeScalars)
        return String(output)
    }
}

/// Writes lines to standard error, each in one `write(2)` where the kernel takes it whole, so that
/// lines from different worker threads do not interleave.
package struct StandardErrorLog: ServerLog {
    private let descriptor: Int32

    /// Creates the log.
    package init() {
        self.init(descriptor: STDERR_FILENO)
    }

    /// A log on another open descriptor, which stays the caller's: tests, where the process's
    /// standard error would mix in what tests beside them write, and benchmarks (`/dev/null`).
    package init(descriptor: Int32) {
        self.descriptor = descriptor
    }

    package func write(line: String) {
        write(utf8Line: Array(line.utf8))
    }

    package func write(utf8Line: consuming [UInt8]) {
        var bytes = utf8Line
        bytes.append(0x0A)
        DescriptorIO.writeAll(descriptor, bytes: bytes)
    }
}

/// Drops every line, for tests and quiet commands.
package struct SilentLog: ServerLog {
    /// Creates the log.
    package init() {}

    package func write(line: String) {}

    package func write(utf8Line: consuming [UInt8]) {}
}
