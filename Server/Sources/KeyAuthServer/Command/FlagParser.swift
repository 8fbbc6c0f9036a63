import KeyAuthArguments

/// The server's command line as ``ArgumentParser`` splits it, with the server's messages: every
/// `--name` takes a value except the boolean flags, and an option no verb reads is refused once
/// the verb has read its own.
struct FlagParser {
    /// The flags that take no value; in the settings file such a key may stand alone for true.
    /// `serve`'s come from its settings, so that a new one cannot be left out: a flag missing
    /// here took the next argument as its value (`--ssh-no-port-forwarding --quiet` lost both).
    static let booleanFlags: Set<String> = Set(["json", "public"]).union(
        ServerCommand.serveSettings.filter(\.isFlag).map(\.key))
    /// Options that may be given more than once (`clients add`).
    private static let repeatableOptions: Set<String> = ["redirect-uri", "post-logout-redirect-uri", "allow-user"]
    private var parsed: ParsedArguments

    init(arguments: [String]) throws(ServerConfigurationError) {
        do {
            parsed = try ArgumentParser.parse(
                arguments, syntax: .keyauthServer(flags: Self.booleanFlags, repeatable: Self.repeatableOptions))
        } catch {
            switch error {
            case .repeated(let name): throw ServerConfigurationError("--\(name) is given more than once")
            case .missingValue(let name): throw ServerConfigurationError("--\(name) needs a value")
            case .invalidBoolean(let name), .flagTakesNoValue(let name):
                throw ServerConfigurationError("--\(name): expected true or false")
            case .unknownOption(let option), .emptyValue(let option):
                throw ServerConfigurationError("unknown option \(option); see keyauth-server --help")
            }
        }
    }

    /// The value of `--name` (the flag spelled with its dashes).
    mutating func value(_ flag: String) -> String? {
        parsed.value(String(flag.dropFirst(2)))
    }

    /// Every value of the repeatable `--name`, in order.
    mutating func values(_ flag: String) -> [String] {
        parsed.values(String(flag.dropFirst(2)))
    }

    /// The boolean `--name`, nil when absent.
    mutating func bool(_ flag: String) -> Bool? {
        parsed.flag(String(flag.dropFirst(2)))
    }

    /// Refuses flags nobody asked for and extra positionals; returns the positionals.
    @discardableResult
    func finish(allowingPositionals count: Int) throws(ServerConfigurationError) -> [String] {
        if let missing = parsed.readOptionsMissingValues().first {
            throw ServerConfigurationError("--\(missing) needs a value")
        }
        if let unknown = parsed.unreadOptions().first {
            let suggestion = parsed.suggestion(for: unknown)
            throw ServerConfigurationError(
                "unknown option --\(unknown)\(suggestion.isEmpty ? ";" : suggestion) see keyauth-server --help")
        }
        guard parsed.positionals.count <= count else {
            throw ServerConfigurationError(
                "unexpected argument \(parsed.positionals[count]); see keyauth-server --help")
        }
        return parsed.positionals
    }
}
