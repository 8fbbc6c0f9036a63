import KeyAuth

/// A PostgreSQL `--db` URL with everything libpq needs to connect, and a masked form for messages.
///
/// The URL carries the database password, and operators paste log lines into tickets, so the
/// URL itself is never printed: ``description`` and every error message use ``redacted``, and
/// ``redact(_:)`` masks the password wherever libpq might echo it (a malformed URL is quoted
/// back in its error text).
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
        let parts = Self.passwords(in: url)
        redacted = parts.redacted
        var secrets: [String] = []
        for password in parts.passwords where !password.isEmpty {
            secrets.append(password)
            if let decoded = Self.percentDecoded(password), decoded != password, !decoded.isEmpty {
                secrets.append(decoded)
            }
        }
        // Longest first, so that a password containing another is masked whole.
        self.secrets = secrets.sorted { $0.utf8.count > $1.utf8.count }
    }

    var description: String { redacted }

    /// Only the masked URL, so that `dump` and debuggers never show the password either.
    var customMirror: Mirror { Mirror(self, children: ["redacted": redacted]) }

    /// The keyword/value pairs for `PQconnectdbParams` with `expand_dbname`, in order.
    ///
    /// Our defaults come first so that the URL may override them (libpq keeps the last value of
    /// a repeated keyword): a short `connect_timeout` so that a request fails over to 503 in
    /// seconds rather than minutes when the database host is unreachable, and TCP keepalives
    /// and a user timeout so that a connection to a host that vanished mid-query breaks instead
    /// of hanging a request thread. `client_encoding` comes last because every string we send and
    /// read is UTF-8, whatever the URL says.
    var connectionParameters: [(keyword: String, value: String)] {
        [
            ("connect_timeout", "3"),
            ("application_name", "keyauth-server"),
            ("keepalives", "1"),
            ("keepalives_idle", "10"),
            ("keepalives_interval", "5"),
            ("keepalives_count", "3"),
            ("tcp_user_timeout", "15000"),
            ("dbname", url),
            ("client_encoding", "UTF8"),
        ]
    }

    /// `text` with every occurrence of the password replaced by `***`.
    func redact(_ text: String) -> String {
        var result = text
        for secret in secrets {
            result = result.replacing(secret, with: "***")
        }
        return result
    }

    /// The masked URL and the passwords it holds: the one in the user-info part and any
    /// `password=` query parameter.
    ///
    /// Anything that is not a `scheme://` URL is masked whole, since a keyword/value connection
    /// string may hold a password anywhere.
    private static func passwords(in url: String) -> (redacted: String, passwords: [String]) {
        guard let schemeEnd = url.range(of: "://") else { return ("<PostgreSQL connection string>", [url]) }
        var passwords: [String] = []
        var redacted = String(url[..<schemeEnd.upperBound])
        var rest = url[schemeEnd.upperBound...]
        // libpq reads user information up to the first "@" that comes before any "/".
        if let at = rest.firstIndex(where: { $0 == "@" || $0 == "/" }), rest[at] == "@" {
            let userInfo = rest[..<at]
            if let colon = userInfo.firstIndex(of: ":") {
                passwords.append(String(userInfo[userInfo.index(after: colon)...]))
                redacted += userInfo[...colon] + "***"
            } else {
                redacted += userInfo
            }
            rest = rest[at...]
        }
        guard let question = rest.firstIndex(of: "?") else { return (redacted + rest, passwords) }
        redacted += rest[...question]
        let query = rest[rest.index(after: question)...].split(separator: "&", omittingEmptySubsequences: false)
        redacted += query.map { pair -> String in
            guard let equals = pair.firstIndex(of: "="), pair[..<equals].lowercased() == "password" else {
                return String(pair)
            }
            passwords.append(String(pair[pair.index(after: equals)...]))
            return pair[...equals] + "***"
        }.joined(separator: "&")
        return (redacted, passwords)
    }

    /// `text` with `%XX` escapes decoded, or nil when that does not give UTF-8.
    private static func percentDecoded(_ text: String) -> String? {
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
