/// Splits a command line into options and positional arguments: the one parser behind `keyauth`
/// and `keyauth-server`.
///
/// Options are `--name value`, `--name=value` or a bare `--name` flag. The two commands have
/// kept slightly different conventions since before they shared this code (a value may start
/// with `--` for the server, not for `keyauth`; the server's flags take `=true`/`=false`); an
/// ``ArgumentSyntax`` says which apply, so that both keep every message and exit status of their
/// contract (PROTOCOL.md section 7).
package enum ArgumentParser {
    /// Parses `arguments` (without the program name and, for `keyauth`, without the command).
    ///
    /// - Parameters:
    ///   - syntax: the options the command knows and the conventions it follows.
    ///   - isPositionalHere: asked for an argument that looks like an option; true makes it a
    ///     positional (a device id after `approve` may start with `-`).
    /// - Throws: ``ArgumentError`` for the first argument that breaks the syntax.
    package static func parse(
        _ arguments: [String], syntax: ArgumentSyntax,
        isPositionalHere: (ParsedArguments, String) -> Bool = { _, _ in false }
    ) throws(ArgumentError) -> ParsedArguments {
        var parsed = ParsedArguments()
        var index = 0
        var optionsEnded = false
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if optionsEnded || !isOption(argument, syntax: syntax) || isPositionalHere(parsed, argument) {
                parsed.positionals.append(argument)
                continue
            }
            if argument == "--" && syntax.doubleDashEndsOptions {
                optionsEnded = true
                continue
            }
            guard argument.hasPrefix("--") else { throw ArgumentError.unknownOption(argument) }
            let body = argument.dropFirst(2)
            var name = String(body)
            var inlineValue: String?
            if let equals = body.firstIndex(of: "=") {
                name = String(body[..<equals])
                inlineValue = String(body[body.index(after: equals)...])
            }
            if syntax.refusesRepeatsBeforeReading, !syntax.repeatableOptions.contains(name),
                parsed.values[name] != nil || parsed.flags[name] != nil
            {
                throw ArgumentError.repeated(name)
            }
            if syntax.flags.contains(name) {
                parsed.flags[name] = try flagValue(name, inlineValue, syntax: syntax)
                parsed.order.append(name)
                continue
            }
            guard syntax.valueOptions.contains(name) || syntax.keepsUnknownOptions else {
                throw ArgumentError.unknownOption("--" + name)
            }
            let value: String
            if let inlineValue {
                value = inlineValue
            } else {
                guard index < arguments.count, syntax.valuesMayStartWithDashes || !arguments[index].hasPrefix("--")
                else {
                    // An option kept for the caller may be one it does not know at all: whether
                    // "needs a value" or "unknown option" is right is decided once it has read its own.
                    guard syntax.keepsUnknownOptions, !syntax.valueOptions.contains(name) else {
                        throw ArgumentError.missingValue(name)
                    }
                    parsed.valuesMissing.insert(name)
                    parsed.order.append(name)
                    continue
                }
                value = arguments[index]
                index += 1
            }
            if syntax.refusesEmptyValues, value.isEmpty { throw ArgumentError.emptyValue(name) }
            if syntax.repeatableOptions.contains(name) {
                parsed.values[name] = value
                parsed.repeatedValues[name, default: []].append(value)
                parsed.order.append(name)
                continue
            }
            guard parsed.values.updateValue(value, forKey: name) == nil else { throw ArgumentError.repeated(name) }
            parsed.order.append(name)
        }
        return parsed
    }

    /// Whether `argument` is read as an option at all rather than as a positional.
    private static func isOption(_ argument: String, syntax: ArgumentSyntax) -> Bool {
        syntax.singleDashIsOption ? argument.hasPrefix("-") && argument != "-" : argument.hasPrefix("--")
    }

    /// A flag's value: true when bare; `true`/`1`/`yes` or `false`/`0`/`no` when the syntax
    /// allows a value at all.
    private static func flagValue(_ name: String, _ inline: String?, syntax: ArgumentSyntax) throws(ArgumentError)
        -> Bool
    {
        guard let inline else { return true }
        guard syntax.flagsTakeBooleanValues else { throw ArgumentError.flagTakesNoValue(name) }
        switch inline.lowercased() {
        case "true", "1", "yes": return true
        case "false", "0", "no": return false
        default: throw ArgumentError.invalidBoolean(name)
        }
    }
}

/// The options a command knows and the conventions it parses them by.
package struct ArgumentSyntax: Sendable {
    /// Options that take a value, without their leading `--`.
    package var valueOptions: Set<String>
    /// Options that take none, without their leading `--`.
    package var flags: Set<String>
    /// Whether a flag accepts `=true`, `=false` and their synonyms.
    package var flagsTakeBooleanValues: Bool
    /// Whether an unknown `--name` is kept as a value option for the caller to refuse once it
    /// has read the ones it knows, instead of being refused at once.
    package var keepsUnknownOptions: Bool
    /// Whether a value given as the next argument may itself start with `--`.
    package var valuesMayStartWithDashes: Bool
    /// Whether an empty value is refused.
    package var refusesEmptyValues: Bool
    /// Whether `-x` is an option (and so refused as unknown) rather than a positional.
    package var singleDashIsOption: Bool
    /// Whether `--` ends the options, making every later argument a positional.
    package var doubleDashEndsOptions: Bool
    /// Whether an option given twice is refused before its second value is read (so a missing
    /// second value is reported as the repeat); flags then may not repeat either.
    package var refusesRepeatsBeforeReading: Bool
    /// Value options that may be given several times, each value kept
    /// (``ParsedArguments/values(_:)``): `clients add --redirect-uri A --redirect-uri B`.
    package var repeatableOptions: Set<String> = []

    /// `keyauth`'s conventions: unknown options and `-x` refused at once, values that do not
    /// start with `--` and are not empty, bare flags that may repeat, `--` ends the options.
    package static func keyauth(valueOptions: Set<String>, flags: Set<String>) -> ArgumentSyntax {
        ArgumentSyntax(
            valueOptions: valueOptions, flags: flags, flagsTakeBooleanValues: false, keepsUnknownOptions: false,
            valuesMayStartWithDashes: false, refusesEmptyValues: true, singleDashIsOption: true,
            doubleDashEndsOptions: true, refusesRepeatsBeforeReading: false)
    }

    /// `keyauth-server`'s conventions: every `--name` takes a value unless it is one of `flags`,
    /// which take `=true`/`=false`; unknown names are left for the caller to refuse; anything
    /// not starting with `--` is a positional; nothing may be given twice.
    package static func keyauthServer(flags: Set<String>, repeatable: Set<String> = []) -> ArgumentSyntax {
        ArgumentSyntax(
            valueOptions: [], flags: flags, flagsTakeBooleanValues: true, keepsUnknownOptions: true,
            valuesMayStartWithDashes: true, refusesEmptyValues: false, singleDashIsOption: false,
            doubleDashEndsOptions: false, refusesRepeatsBeforeReading: true, repeatableOptions: repeatable)
    }
}

/// A command line split by ``ArgumentParser``.
package struct ParsedArguments: Sendable, Equatable {
    /// The values of options, by name without `--`.
    package var values: [String: String] = [:]
    /// The flags given, by name without `--`, with their value (true when bare).
    package var flags: [String: Bool] = [:]
    /// Every value of a repeatable option, in order, by name without `--`.
    package var repeatedValues: [String: [String]] = [:]
    /// The positional arguments, in order.
    package var positionals: [String] = []
    /// The option and flag names in the order given.
    package var order: [String] = []
    /// Kept options given last without a value (``ArgumentSyntax/keepsUnknownOptions``).
    package var valuesMissing: Set<String> = []
    /// The names a caller has asked for, for ``unreadOptions()``.
    private var read: Set<String> = []

    package init() {}

    /// The value of `name`, marking it as read.
    package mutating func value(_ name: String) -> String? {
        read.insert(name)
        return values[name]
    }

    /// Every value of the repeatable option `name`, in order (empty when absent), marking it as read.
    package mutating func values(_ name: String) -> [String] {
        read.insert(name)
        return repeatedValues[name] ?? []
    }

    /// The flag `name` (nil when absent), marking it as read.
    package mutating func flag(_ name: String) -> Bool? {
        read.insert(name)
        return flags[name]
    }

    /// The options given but never read through ``value(_:)`` or ``flag(_:)``, sorted: unknown to
    /// the command.
    package func unreadOptions() -> [String] {
        (Array(values.keys) + Array(flags.keys) + Array(valuesMissing)).filter { !read.contains($0) }.sorted()
    }

    /// `; did you mean --NAME?` for `option`, naming the nearest of the options a caller has
    /// asked for (``NearestWord/optionSuggestion(for:among:)``), or empty.
    package func suggestion(for option: String) -> String {
        NearestWord.optionSuggestion(for: option, among: read)
    }

    /// The options a caller asked for that were given last without their value, sorted.
    package func readOptionsMissingValues() -> [String] {
        valuesMissing.filter { read.contains($0) }.sorted()
    }
}

/// What is wrong with a command line; each command words it in its own messages.
package enum ArgumentError: Error, Sendable, Equatable {
    /// An option the command does not know, as written (`-x`, `--bogus`).
    case unknownOption(String)
    /// A value option at the end, or followed by another option.
    case missingValue(String)
    /// A value option with an empty value.
    case emptyValue(String)
    /// An option given twice.
    case repeated(String)
    /// A flag given a value.
    case flagTakesNoValue(String)
    /// A flag given a value other than true or false.
    case invalidBoolean(String)
}
