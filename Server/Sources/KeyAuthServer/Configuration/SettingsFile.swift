import Glibc

/// A settings file (`keyauth-server --config FILE`, by default `/etc/keyauth/server.conf` when it
/// exists): one `key = value` a line, the key being the long name of a `serve` flag without its
/// dashes, or a boolean flag's name alone for `true` (`trust-proxy`); blank lines and lines whose
/// first non-blank character is `#` are ignored.
///
/// A `#` after a space or tab starts a comment (`listen = 127.0.0.1:8080  # public`); a `#`
/// inside a value, after another character, is part of it (a path `/srv/a#b`). Every line is
/// kept with its number, so that an unknown key or a bad value is reported where the operator
/// can find it.
struct SettingsFile: Sendable {
    /// One `key = value` line.
    struct Entry: Sendable, Equatable {
        let value: String
        /// The line number, from 1.
        let line: Int
    }

    /// The file's path as given, for messages.
    let path: String
    /// The settings by key.
    let entries: [String: Entry]

    /// The largest file read: a settings file is a few kilobytes; anything bigger is a mistake.
    static let maximumSize = 1 << 20

    /// Parses `text`, read from `path`.
    ///
    /// - Throws: ``ServerConfigurationError`` (exit 78) naming the line of a line without `=`,
    ///   a key that is not a flag's name, a key given twice or an empty value.
    init(path: String, text: String) throws(ServerConfigurationError) {
        self.path = path
        var entries: [String: Entry] = [:]
        // A file edited on Windows ends its lines with CR LF, one Character in Swift.
        let lines = text.split(omittingEmptySubsequences: false) { $0 == "\n" || $0 == "\r\n" }
        for (index, rawLine) in lines.enumerated() {
            let line = Self.withoutComment(rawLine.trimmingWhitespace())
            let number = index + 1
            if line.isEmpty { continue }
            let equals = line.firstIndex(of: "=")
            let key = line[..<(equals ?? line.endIndex)].trimmingWhitespace()
            guard !key.isEmpty, key.allSatisfy({ $0.isASCII && ($0.isLowercase || $0.isNumber || $0 == "-") }) else {
                throw .settingsFile(path, line: number, "expected key = value, with a flag's name as the key")
            }
            let value: String
            if let equals {
                value = line[line.index(after: equals)...].trimmingWhitespace()
            } else if FlagParser.booleanFlags.contains(key) {
                // A bare boolean key is on, as the bare flag is.
                value = "true"
            } else {
                throw .settingsFile(path, line: number, "expected key = value (only a true/false key may stand alone)")
            }
            guard !value.isEmpty else { throw .settingsFile(path, line: number, "\(key) has no value") }
            if let earlier = entries[key] {
                throw .settingsFile(path, line: number, "\(key) is already set on line \(earlier.line)")
            }
            entries[key] = Entry(value: value, line: number)
        }
        self.entries = entries
    }

    /// `line` up to a `#` that starts it or follows a space or tab, trimmed.
    private static func withoutComment(_ line: String) -> String {
        var previous: Character = " "
        for index in line.indices {
            if line[index] == "#", previous == " " || previous == "\t" {
                return line[..<index].trimmingWhitespace()
            }
            previous = line[index]
        }
        return line
    }

    /// Reads and parses the file at `path`.
    ///
    /// - Throws: ``ServerConfigurationError`` (exit 78) when the file cannot be read, is larger
    ///   than ``maximumSize`` or is not UTF-8, or for a bad line.
    static func load(path: String) throws(ServerConfigurationError) -> SettingsFile {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw ServerConfigurationError(
                "\(path): cannot read the settings file: \(String(cString: strerror(errno)))",
                status: ServerCommand.ExitStatus.configuration)
        }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16_384)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count >= 0 else {
                throw ServerConfigurationError(
                    "\(path): cannot read the settings file: \(String(cString: strerror(errno)))",
                    status: ServerCommand.ExitStatus.configuration)
            }
            if count == 0 { break }
            bytes += buffer.prefix(count)
            guard bytes.count <= maximumSize else {
                throw ServerConfigurationError(
                    "\(path): the settings file is larger than 1 MiB", status: ServerCommand.ExitStatus.configuration)
            }
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw ServerConfigurationError(
                "\(path): the settings file is not UTF-8 text", status: ServerCommand.ExitStatus.configuration)
        }
        return try SettingsFile(path: path, text: text)
    }
}

extension ServerConfigurationError {
    /// An error in line `line` of the settings file `path` (exit 78, EX_CONFIG).
    static func settingsFile(_ path: String, line: Int, _ message: String) -> ServerConfigurationError {
        ServerConfigurationError("\(path):\(line): \(message)", status: ServerCommand.ExitStatus.configuration)
    }
}
