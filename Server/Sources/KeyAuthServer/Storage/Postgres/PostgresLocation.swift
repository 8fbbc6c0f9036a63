import KeyAuth

/// A PostgreSQL `--db` URL with everything libpq needs to connect, and a masked form for messages.
///
/// The URL carries the database password, and operators paste log lines into tickets, so the
/// URL itself is never printed: ``description`` and every error message use ``redacted``, and
/// ``redact(_:)`` masks the password wherever libpq might echo it (a malformed URL is quoted
/// back in its error text). A URL that libpq would cut somewhere inside the password
/// (``problem(in:)``) is refused before libpq sees it, since its errors would then quote a
/// piece that no mask recognises.
struct PostgresLocation: Sendable, CustomStringConvertible, CustomReflectable {
    /// The URL as given. Secret: never log or interpolate it.
    private let url: String
    /// The URL with its password replaced by `***`.
    let redacted: String
    /// The password as written in the URL and as libpq decodes it, for masking error texts.
    private let secrets: [String]

    /// Keeps `url` and prepares its masked form.
    init(_ url: String) {
        // libpq recognises only lower-case schemes; `StorageFactory` accepts any case.
        if let schemeEnd = url.range(of: "://"),
            ["postgres", "postgresql"].contains(url[..<schemeEnd.lowerBound].lowercased())
        {
            self.url = url[..<schemeEnd.lowerBound].lowercased() + url[schemeEnd.lowerBound...]
        } else {
            self.url = url
        }
        let bytes = Array(url.utf8)
        guard let parts = URLParts(bytes) else {
            // Not a URL: a keyword/value connection string may hold a password anywhere.
            redacted = "<PostgreSQL connection string>"
            secrets = [url]
            return
        }
        let masked = parts.secretRanges
        var redacted: [UInt8] = []
        var position = 0
        var secrets: [String] = []
        for range in masked {
            redacted += bytes[position..<range.lowerBound] + Array("***".utf8)
            position = range.upperBound
            let secret = String(decoding: bytes[range], as: UTF8.self)
            secrets.append(secret)
            if let decoded = Self.percentDecoded(secret), decoded != secret, !decoded.isEmpty {
                secrets.append(decoded)
            }
        }
        redacted += bytes[position...]
        self.redacted = String(decoding: redacted, as: UTF8.self)
        // Longest first, so that a password containing another is masked whole.
        self.secrets = secrets.sorted { $0.utf8.count > $1.utf8.count }
    }

    /// Why libpq would not read `url` as the operator meant it, or nil when it would.
    ///
    /// libpq ends the user information at the first `@` (before any `/`) and a query parameter
    /// at the next `&`, so a password holding one of them, not percent-encoded, is read in
    /// pieces: a piece of it goes to the server as the password, another becomes the host name
    /// (looked up in DNS) or a parameter, and libpq's error quotes that piece. Such a URL is
    /// refused before libpq sees it. The reason never quotes the URL.
    static func problem(in url: String) -> String? {
        guard let parts = URLParts(Array(url.utf8)) else { return nil }
        let bytes = parts.bytes
        let hostStart = parts.libpqUserInfoEnd.map { $0 + 1 } ?? parts.start
        if bytes[hostStart..<(parts.queryStart ?? bytes.count)].contains(UInt8(ascii: "@")) {
            return "the PostgreSQL URL has an \"@\" after its user information (one in a password, user name "
                + "or database name, or a \"/\" in a password); percent-encode them (%40, %2F) so that libpq "
                + "reads the URL as written"
        }
        if parts.queryParameters.contains(where: { !$0.isEmpty && !bytes[$0].contains(UInt8(ascii: "=")) }) {
            return "a query parameter of the PostgreSQL URL has no \"=\"; "
                + "percent-encode an \"&\" in a password (%26) so that libpq reads the URL as written"
        }
        return nil
    }

    /// Whether `text` is a libpq keyword/value connection string (`host=db password=...`):
    /// a `--db` value that is not a URL but would be taken for a file name, and printed.
    static func isKeywordValueString(_ text: String) -> Bool {
        text.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).contains { word in
            guard let equals = word.firstIndex(of: "=") else { return false }
            return Self.connectionKeywords.contains(word[..<equals].lowercased())
        }
    }

    /// libpq's connection keywords that a connection string would begin with or hold.
    private static let connectionKeywords: Set<String> = [
        "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "service", "sslmode",
        "sslpassword", "connect_timeout", "options", "application_name", "target_session_attrs",
    ]

    var description: String { redacted }

    /// Only the masked URL, so that `dump` and debuggers never show the password either.
    var customMirror: Mirror { Mirror(self, children: ["redacted": redacted]) }

    /// The keyword/value pairs for `PQconnectdbParams` with `expand_dbname`, in order.
    ///
    /// Our defaults come first so that the URL may override them (libpq keeps the last value of
    /// a repeated keyword): a short `connect_timeout` so that a request fails over to 503 in
    /// seconds rather than minutes when the database host is unreachable, and TCP keepalives
    /// and a user timeout so that a connection to a host that vanished mid-query breaks instead
    /// of hanging a request thread; `target_session_attrs=read-write`, so that of a URL's
    /// several hosts, or after a failover, the server connects to the primary rather than keep a
    /// standby on which every write fails; server-side limits on a statement (30 s) and on a wait for a
    /// lock (10 s), so that a table another session holds locked, or a runaway query, costs a
    /// request a 503 instead of a request thread for as long as it lasts. Those go after the URL
    /// with the URL's own `options` behind them (libpq keeps one `options`, the last; the server
    /// applies its `-c` settings in order), so that a URL's `search_path` keeps them and a URL's
    /// own `statement_timeout` wins. `client_encoding` comes last because every string we send
    /// and read is UTF-8, whatever the URL says.
    var connectionParameters: [(keyword: String, value: String)] {
        [
            ("connect_timeout", "3"),
            ("application_name", "keyauth-server"),
            ("keepalives", "1"),
            ("keepalives_idle", "10"),
            ("keepalives_interval", "5"),
            ("keepalives_count", "3"),
            ("tcp_user_timeout", "15000"),
            ("target_session_attrs", "read-write"),
            ("dbname", url),
            ("options", "-c statement_timeout=30s -c lock_timeout=10s" + (urlOptions.map { " " + $0 } ?? "")),
            ("client_encoding", "UTF8"),
        ]
    }

    /// The URL's own `options` query parameter, percent-decoded, if it has one.
    private var urlOptions: String? {
        guard let parts = URLParts(Array(url.utf8)) else { return nil }
        for range in parts.queryParameters {
            guard let (keyword, value) = parts.keywordAndValue(range), keyword == "options" else { continue }
            return Self.percentDecoded(String(decoding: parts.bytes[value], as: UTF8.self))
        }
        return nil
    }

    /// `text` with every occurrence of the password replaced by `***`.
    func redact(_ text: String) -> String {
        var result = text
        for secret in secrets {
            result = result.replacing(secret, with: "***")
        }
        return result
    }

    /// `text` with `%XX` escapes decoded, or nil when that does not give UTF-8.
    fileprivate static func percentDecoded(_ text: String) -> String? {
        var bytes: [UInt8] = []
        var iterator = Array(text.utf8).makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard let high = iterator.next().flatMap(Hex.value(ofDigit:)),
                let low = iterator.next().flatMap(Hex.value(ofDigit:))
            else {
                return nil
            }
            bytes.append(high << 4 | low)
        }
        return String(validating: bytes, as: UTF8.self)
    }
}

/// The parts of a `scheme://` URL's bytes that decide where a password may be: where libpq ends
/// the user information, where the query starts, and the query's parameters.
private struct URLParts {
    let bytes: [UInt8]
    /// Where the part after `scheme://` starts.
    let start: Int
    /// The `@` that ends the user information as libpq reads it: the first `@` before any `/`.
    let libpqUserInfoEnd: Int?
    /// The `?` that starts the query: the first after libpq's user information.
    let queryStart: Int?

    /// Nil for text without `://`.
    init?(_ bytes: [UInt8]) {
        let separator = Array("://".utf8)
        guard let schemeEnd = bytes.indices.first(where: { bytes[$0...].starts(with: separator) }) else {
            return nil
        }
        self.bytes = bytes
        start = schemeEnd + separator.count
        let stop = bytes[start...].firstIndex { $0 == UInt8(ascii: "@") || $0 == UInt8(ascii: "/") }
        libpqUserInfoEnd = stop.flatMap { bytes[$0] == UInt8(ascii: "@") ? $0 : nil }
        queryStart = bytes[(libpqUserInfoEnd.map { $0 + 1 } ?? start)...].firstIndex(of: UInt8(ascii: "?"))
    }

    /// The byte ranges of the query's `&`-separated parameters.
    var queryParameters: [Range<Int>] {
        guard let queryStart else { return [] }
        var ranges: [Range<Int>] = []
        var begin = queryStart + 1
        for index in (queryStart + 1)..<bytes.count where bytes[index] == UInt8(ascii: "&") {
            ranges.append(begin..<index)
            begin = index + 1
        }
        ranges.append(begin..<bytes.count)
        return ranges
    }

    /// A query parameter's keyword, percent-decoded as libpq decodes it (`pass%77ord` is
    /// `password`), and its value's byte range; nil for a parameter without `=`.
    func keywordAndValue(_ parameter: Range<Int>) -> (keyword: String, value: Range<Int>)? {
        guard let equals = bytes[parameter].firstIndex(of: UInt8(ascii: "=")) else { return nil }
        let keyword = String(decoding: bytes[parameter.lowerBound..<equals], as: UTF8.self)
        return (PostgresLocation.percentDecoded(keyword) ?? keyword, (equals + 1)..<parameter.upperBound)
    }

    /// Query parameters whose values are secrets: the password, and the client key's.
    static let secretKeywords: Set<String> = ["password", "sslpassword"]

    /// The byte ranges that may hold a password, in order: the user information's after its
    /// first `:`, the values of `password` and `sslpassword` query parameters (their keywords
    /// percent-decoded, as libpq reads them), and query parameters without `=`.
    ///
    /// The user information is taken to end at the last `@` before the query, not libpq's first:
    /// a password that holds an `@` or a `/` is refused (``PostgresLocation/problem(in:)``), but
    /// the message that says so must not show the rest of it. A parameter without `=` may be the
    /// rest of a password that held an `&`.
    var secretRanges: [Range<Int>] {
        var ranges: [Range<Int>] = []
        let lastAt = bytes[start..<(queryStart ?? bytes.count)].lastIndex(of: UInt8(ascii: "@"))
        if let userInfoEnd = lastAt ?? libpqUserInfoEnd,
            let colon = bytes[start..<userInfoEnd].firstIndex(of: UInt8(ascii: ":"))
        {
            ranges.append((colon + 1)..<userInfoEnd)
        }
        for parameter in queryParameters where !parameter.isEmpty {
            guard let (keyword, value) = keywordAndValue(parameter) else {
                ranges.append(parameter)
                continue
            }
            if Self.secretKeywords.contains(keyword.lowercased()) { ranges.append(value) }
        }
        return ranges.filter { !$0.isEmpty }
    }
}
