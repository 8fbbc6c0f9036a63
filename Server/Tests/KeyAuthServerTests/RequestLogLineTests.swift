import Foundation
import KeyAuth
import Testing

@testable import KeyAuthServer

/// Request log lines, text and JSON, are written straight into bytes. These tests hold them to
/// the lines the string-built version wrote, kept here as the reference, over inputs a client
/// controls.
@Suite("keyauth-server request log lines, written as bytes")
struct RequestLogLineTests {
    /// The line as it was built before: fields through strings, joined by spaces.
    private static func referenceLine(_ entry: RequestLogEntry, now: Int64) -> String {
        func sanitise(_ text: String, limit: Int) -> String {
            var output = ""
            for scalar in text.unicodeScalars.prefix(limit) {
                output.unicodeScalars.append((0x21...0x7E).contains(scalar.value) ? scalar : "?")
            }
            if text.unicodeScalars.count > limit { output += "..." }
            return output.isEmpty ? "-" : output
        }
        let milliseconds = (entry.milliseconds * 10).rounded() / 10
        var fields = [
            referenceTime(now), sanitise(entry.client, limit: 64), sanitise(entry.method, limit: 16),
            sanitise(entry.path, limit: 128), String(entry.status), "\(milliseconds)ms", "route=\(entry.route)",
        ]
        if let error = entry.error { fields.append("error=\(sanitise(error, limit: 64))") }
        if let user = entry.user { fields.append("user=\(sanitise(user, limit: 128))") }
        if let kid = entry.deviceKID { fields.append("kid=\(sanitise(kid, limit: 64))") }
        if let clientID = entry.clientID { fields.append("client_id=\(sanitise(clientID, limit: 128))") }
        return fields.joined(separator: " ")
    }

    /// The JSON line as it was built before: a `JSONValue` object serialized in a fixed order.
    private static func referenceJSONLine(_ entry: RequestLogEntry, now: Int64) -> String {
        let bounded = CapturingLog.bounded
        var object: [String: JSONValue] = [
            "time": .string(referenceTime(now)), "client": .string(bounded(entry.client, 64)),
            "method": .string(bounded(entry.method, 16)), "path": .string(bounded(entry.path, 128)),
            "route": .string(entry.route), "status": .integer(Int64(entry.status)),
            "duration_ms": .number((entry.milliseconds * 10).rounded() / 10),
        ]
        if let error = entry.error { object["error"] = .string(bounded(error, 64)) }
        if let user = entry.user { object["user"] = .string(bounded(user, 128)) }
        if let kid = entry.deviceKID { object["kid"] = .string(bounded(kid, 64)) }
        if let clientID = entry.clientID { object["client_id"] = .string(bounded(clientID, 128)) }
        return JSONValue.object(object).serialized(leadingKeys: [
            "time", "client", "method", "path", "route", "status", "error", "user", "kid", "client_id", "duration_ms",
        ])
    }

    /// RFC 3339 as it was built before, through padded strings.
    private static func referenceTime(_ seconds: Int64) -> String {
        var value = time_t(seconds)
        var parts = tm()
        guard gmtime_r(&value, &parts) != nil else { return String(seconds) }
        func pad(_ number: Int32, _ width: Int) -> String {
            let digits = String(number)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        return pad(parts.tm_year + 1900, 4) + "-" + pad(parts.tm_mon + 1, 2) + "-" + pad(parts.tm_mday, 2) + "T"
            + pad(parts.tm_hour, 2) + ":" + pad(parts.tm_min, 2) + ":" + pad(parts.tm_sec, 2) + "Z"
    }

    /// Text a client chooses: empty, spaces, controls, DEL, non-ASCII of 2 to 4 bytes, a
    /// combining mark, and lengths around each field's limit.
    private static let awkward = [
        "", " ", "alice", "a b", "line\nforged", "tab\there", "del\u{7F}", "nul\u{0}", "é", "e\u{301}", "日本語",
        "🔑 key", "\u{FEFF}bom", String(repeating: "x", count: 16), String(repeating: "x", count: 17),
        String(repeating: "é", count: 64), String(repeating: "y", count: 65), String(repeating: "z", count: 128),
        String(repeating: "🔑", count: 129),
    ]

    @Test("every field a client controls comes out as the string-built line wrote it")
    func sameAsStringBuiltLine() {
        var compared = 0
        for (index, text) in Self.awkward.enumerated() {
            let other = Self.awkward[(index + 3) % Self.awkward.count]
            let entries = [
                RequestLogEntry(
                    client: text, method: text, path: text, route: "/oauth/token", status: 200, error: nil, user: nil,
                    deviceKID: nil, milliseconds: 1.25),
                RequestLogEntry(
                    client: "192.0.2.1", method: "POST", path: other, route: "unknown", status: 400, error: text,
                    user: other, deviceKID: text, clientID: other, milliseconds: 0.04),
                RequestLogEntry(
                    client: other, method: "GET", path: "/v1/devices", route: "/v1/devices", status: 503,
                    error: other, user: text, deviceKID: other, clientID: text, milliseconds: 12_345.678),
            ]
            for entry in entries {
                let line = String(decoding: CapturingLog.textLine(entry, now: 1_800_000_000), as: UTF8.self)
                #expect(line == Self.referenceLine(entry, now: 1_800_000_000), "input \(Array(text.utf8))")
                #expect(!line.contains("\n"))
                let json = String(decoding: CapturingLog.jsonLine(entry, now: 1_800_000_000), as: UTF8.self)
                #expect(json == Self.referenceJSONLine(entry, now: 1_800_000_000), "input \(Array(text.utf8))")
                #expect(!json.contains("\n"))
                compared += 1
            }
        }
        #expect(compared == Self.awkward.count * 3)
    }

    @Test("durations come out rounded to a tenth as Double wrote them, odd values included")
    func durations() {
        let values: [Double] = [
            0, 0.04, 0.05, 0.15, 0.25, 1, 9.95, 12, 99.99, 1234.56, 999_999.94, 1e11, 1e12, 1e15, 1e20, -0.0, -0.04,
            -3.5, .nan, .infinity, .greatestFiniteMagnitude, 1e300,
        ]
        for value in values {
            let entry = RequestLogEntry(
                client: "192.0.2.1", method: "GET", path: "/healthz", route: "/healthz", status: 200, error: nil,
                user: nil, deviceKID: nil, milliseconds: value)
            let line = String(decoding: CapturingLog.textLine(entry, now: 0), as: UTF8.self)
            #expect(line == Self.referenceLine(entry, now: 0), "duration \(value)")
            let json = String(decoding: CapturingLog.jsonLine(entry, now: 0), as: UTF8.self)
            #expect(json == Self.referenceJSONLine(entry, now: 0), "duration \(value)")
        }
        var tenths: [UInt8] = []
        CapturingLog.appendTenths(0.04, to: &tenths)
        #expect(String(decoding: tenths, as: UTF8.self) == "0.0")
    }

    @Test("RFC 3339 times are the same bytes as before, from year 0 to beyond 9999")
    func times() {
        let seconds: [Int64] = [
            0, 1, 59, 1_714_564_800, 1_800_000_000, 951_782_400, 253_402_300_799, 253_402_300_800, -1,
            -62_135_596_800, -62_135_596_801, -62_198_755_200, -100_000_000_000, Int64(Int32.max) * 100,
        ]
        for value in seconds {
            #expect(RFC3339.string(fromSeconds: value) == Self.referenceTime(value), "seconds \(value)")
        }
        #expect(RFC3339.string(fromSeconds: 1_714_564_800) == "2024-05-01T12:00:00Z")
        #expect(RFC3339.string(fromSeconds: 253_402_300_800) == "10000-01-01T00:00:00Z")
        // Past Int32's years but within what glibc breaks down: once a trap (the year overflowed
        // Int32), reachable from a damaged stored time through the device list.
        #expect(RFC3339.string(fromSeconds: 67_767_976_233_532_800) == "2147483648-01-01T00:00:00Z")
        #expect(RFC3339.string(fromSeconds: .max) == String(Int64.max))
        #expect(RFC3339.string(fromSeconds: .min) == String(Int64.min))
    }

    @Test("the standard error log writes a request line as its bytes and one newline")
    func standardErrorWritesBytes() throws {
        var ends: [Int32] = [0, 0]
        try #require(pipe(&ends) == 0)
        defer { close(ends[0]) }
        let entry = RequestLogEntry(
            client: "192.0.2.1", method: "POST", path: "/oauth/token", route: "/oauth/token", status: 200,
            error: nil, user: "alice", deviceKID: "kid-1", milliseconds: 2)
        let log = StandardErrorLog(descriptor: ends[1])
        log.request(entry, format: .text, now: 1_800_000_000)
        log.write(line: "2027-01-15T08:00:00Z notice: plain")
        close(ends[1])
        var bytes = [UInt8](repeating: 0, count: 4096)
        var received: [UInt8] = []
        while case let count = read(ends[0], &bytes, bytes.count), count > 0 {
            received += bytes.prefix(count)
        }
        #expect(
            String(decoding: received, as: UTF8.self)
                == "2027-01-15T08:00:00Z 192.0.2.1 POST /oauth/token 200 2.0ms route=/oauth/token user=alice kid=kid-1\n"
                + "2027-01-15T08:00:00Z notice: plain\n")
    }
}
