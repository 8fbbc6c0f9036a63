import Glibc
import KeyAuthArguments

/// The settings of one command, from its sources in order of precedence: a flag, else its
/// `KEYAUTH_SERVER_*` variable, else the settings file's line with the flag's name, else the
/// default (which the caller keeps).
///
/// A setting's variable is the flag's name in capitals with `_` for `-` (`--metrics-listen`,
/// `KEYAUTH_SERVER_METRICS_LISTEN`), and its key in the file is the name without dashes, so a
/// new flag gets both by being read here. What was read is remembered, so that ``finish()``
/// can refuse a file key no flag reads, and `check-config` can say where each value came from.
struct ServerSettings {
    /// Where a value came from.
    enum Origin: Sendable, Equatable {
        case flag(String)
        case environment(String)
        case file(path: String, line: Int, key: String)

        /// How messages name it: `--listen`, `KEYAUTH_SERVER_LISTEN`, `/etc/keyauth/server.conf:3: listen`.
        var label: String {
            switch self {
            case .flag(let name): name
            case .environment(let name): name
            case .file(let path, let line, let key): "\(path):\(line): \(key)"
            }
        }

        /// The exit status for a bad value from here: 78 (EX_CONFIG) for the file, else 64.
        var status: Int32 {
            if case .file = self { return ServerCommand.ExitStatus.configuration }
            return ServerCommand.ExitStatus.usage
        }
    }

    /// A value and where it came from.
    struct Setting {
        let value: String
        let origin: Origin

        /// An error about this value, prefixed with its origin and with its exit status.
        func error(_ message: String) -> ServerConfigurationError {
            ServerConfigurationError("\(origin.label): \(message)", status: origin.status)
        }

        /// The value as a duration in seconds (``DurationText``: `90`, `90s`, `5m`, `1h30m`, `2d`)
        /// within `range`, the one syntax of every duration option.
        ///
        /// - Throws: ``ServerConfigurationError`` naming the origin, with the range and the forms.
        func duration(_ range: ClosedRange<Int64>) throws(ServerConfigurationError) -> Int64 {
            guard let seconds = DurationText.seconds(value), range.contains(seconds) else {
                throw error(
                    "expected a duration from \(DurationText.text(range.lowerBound)) to "
                        + "\(DurationText.text(range.upperBound)) (90, 90s, 5m, 1h30m, 2d), got \(value)")
            }
            return seconds
        }

        /// The value as an RSA signing key size: 2048, 3072 or 4096 (`--signing-key-bits`, for
        /// `serve`'s first key and for `keys rotate`).
        func signingKeyBits() throws(ServerConfigurationError) -> Int {
            guard let bits = Int(value), [2048, 3072, 4096].contains(bits) else {
                throw error("expected 2048, 3072 or 4096, got \(value)")
            }
            return bits
        }
    }

    private var flags: FlagParser
    private let environment: [String: String]
    /// The settings file, when one is used.
    let file: SettingsFile?
    /// The flags' names that the command has asked for: the keys the file may have.
    private var readKeys: Set<String> = []
    /// Where each setting read so far came from, by flag name without dashes.
    private(set) var origins: [String: Origin] = [:]

    /// The sources of a command: its flags, the environment and the settings file that
    /// `--config` or `KEYAUTH_SERVER_CONFIG` names, or `defaultFile` when that exists.
    ///
    /// - Throws: ``ServerConfigurationError`` for a named file that cannot be read or a bad line.
    init(flags: FlagParser, environment: [String: String], defaultFile: String?) throws(ServerConfigurationError) {
        self.flags = flags
        self.environment = environment
        if let path = self.flags.value("--config") ?? environment["KEYAUTH_SERVER_CONFIG"] {
            guard !path.isEmpty else { throw ServerConfigurationError("--config: empty path") }
            file = try SettingsFile.load(path: path)
        } else if let defaultFile, access(defaultFile, F_OK) == 0 {
            file = try SettingsFile.load(path: defaultFile)
        } else {
            file = nil
        }
    }

    /// The value of `flag` (spelled with its dashes) from the first source that has it.
    mutating func value(_ flag: String) -> Setting? {
        let key = String(flag.dropFirst(2))
        // Known in the file even when a flag or variable overrides it there.
        readKeys.insert(key)
        let variable = Self.variable(for: flag)
        let setting: Setting?
        if let value = flags.value(flag) {
            setting = Setting(value: value, origin: .flag(flag))
        } else if let value = environment[variable] {
            setting = Setting(value: value, origin: .environment(variable))
        } else {
            setting = fileValue(key)
        }
        if let setting { origins[key] = setting.origin }
        return setting
    }

    /// The value of `flag` as given on the command line only: an option of one admin command
    /// (`--since`, `--user`), which has no variable and no key in the settings file.
    mutating func option(_ flag: String) -> String? {
        flags.value(flag)
    }

    /// Every value of the repeatable `flag` of the command line only (`--redirect-uri`).
    mutating func options(_ flag: String) -> [String] {
        flags.values(flag)
    }

    /// The boolean `flag` of the command line only (`--json`), nil when absent.
    mutating func commandFlag(_ flag: String) -> Bool? {
        flags.bool(flag)
    }

    /// The boolean `flag`: a bare flag or `--flag=true|false`, or `1|true|yes|on` and
    /// `0|false|no|off` (or empty, in the environment) from the other sources.
    mutating func bool(_ flag: String) throws(ServerConfigurationError) -> Bool? {
        let key = String(flag.dropFirst(2))
        readKeys.insert(key)
        if let value = flags.bool(flag) {
            origins[key] = .flag(flag)
            return value
        }
        let variable = Self.variable(for: flag)
        let setting =
            environment[variable].map { Setting(value: $0, origin: .environment(variable)) } ?? fileValue(key)
        guard let setting else { return nil }
        origins[key] = setting.origin
        // An empty variable is off, as shells and unit files write it; the file has no empty values.
        if case .environment = setting.origin, setting.value.isEmpty { return false }
        switch setting.value.lowercased() {
        case "1", "true", "yes", "on": return true
        case "0", "false", "no", "off": return false
        default: throw setting.error("expected true or false, got \(setting.value)")
        }
    }

    /// The whole number `flag` from the first source that has it, within `range`.
    mutating func number(_ flag: String, _ range: ClosedRange<Int>) throws(ServerConfigurationError) -> Int? {
        guard let setting = value(flag) else { return nil }
        guard let number = Int(setting.value), range.contains(number) else {
            throw setting.error(
                "expected a number from \(range.lowerBound) to \(range.upperBound), got \(setting.value)")
        }
        return number
    }

    /// The duration `flag` from the first source that has it, in seconds within `range`.
    mutating func duration(_ flag: String, _ range: ClosedRange<Int64>) throws(ServerConfigurationError) -> Int64? {
        try value(flag).map { setting throws(ServerConfigurationError) in try setting.duration(range) }
    }

    private mutating func fileValue(_ key: String) -> Setting? {
        guard let file, let entry = file.entries[key] else { return nil }
        return Setting(value: entry.value, origin: .file(path: file.path, line: entry.line, key: key))
    }

    /// `KEYAUTH_SERVER_METRICS_LISTEN` for `--metrics-listen`.
    static func variable(for flag: String) -> String {
        "KEYAUTH_SERVER_" + flag.dropFirst(2).uppercased().replacing("-", with: "_")
    }

    /// Refuses file keys that no flag of the command read (with their line), then flags nobody
    /// asked for and extra positionals, as ``FlagParser/finish(allowingPositionals:)``.
    ///
    /// - Parameter checkingFile: false for the admin commands, which read only `db` from a file
    ///   written for `serve`.
    /// - Returns: the positionals.
    @discardableResult
    func finish(allowingPositionals count: Int, checkingFile: Bool = true) throws(ServerConfigurationError)
        -> [String]
    {
        if checkingFile, let file,
            let (key, entry) = file.entries.filter({ !readKeys.contains($0.key) }).min(by: {
                $0.value.line < $1.value.line
            })
        {
            // As for a mistyped flag: `unknown key lisen; did you mean listen? see ...`.
            let nearest = NearestWord.nearest(to: key, among: readKeys.sorted()).map { "; did you mean \($0)?" } ?? ";"
            throw .settingsFile(file.path, line: entry.line, "unknown key \(key)\(nearest) see keyauth-server --help")
        }
        return try flags.finish(allowingPositionals: count)
    }
}
