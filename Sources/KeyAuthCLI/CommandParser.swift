import KeyAuth
import KeyAuthArguments

/// Parses `keyauth` command lines by hand (no argument-parser package is available).
///
/// Options may come in any order after the command, as `--name value` or `--name=value`. An
/// unknown command or option, a missing value, a repeated option or a value outside its set is a
/// usage error (exit 64) whose message names the help to read.
package enum CommandParser {
    /// The options each command accepts: those taking a value, and flags.
    private static let valueOptions: [CommandName: Set<String>] = [
        .register: [
            "server", "user", "name", "bits", "presence", "pam-service", "enrollment-code", "recovery-code", "account",
            "key-store",
        ],
        .login: ["account"], .token: ["account"], .proof: ["account", "nonce"], .logout: ["account"], .pin: ["account"],
        .defaultAccount: [], .status: ["account"],
        .devices: ["account"],
        .pubkey: ["account"], .reset: ["account"], .requests: ["account"], .approve: ["account"],
        .deny: ["account"], .agent: ["account", "timeout"], .ssh: ["account", "write"], .recoveryCodes: ["account"],
        .attest: ["account"], .help: [],
    ]
    private static let flagOptions: [CommandName: Set<String>] = [
        .register: ["pin-stdin", "no-wait", "insecure-http"], .login: ["pin-stdin", "no-wait"], .token: ["pin-stdin"],
        .proof: ["pin-stdin"],
        .logout: [], .pin: ["pin-stdin"], .defaultAccount: [], .status: ["json"], .devices: ["pin-stdin", "json"],
        .pubkey: ["jwk"],
        .reset: ["local-only", "pin-stdin", "yes"],
        .requests: ["watch", "pin-stdin", "json"], .approve: ["pin-stdin"], .deny: ["pin-stdin"],
        .agent: ["pin-stdin", "lock", "stop", "background", "serve-locked"], .ssh: ["pin-stdin"],
        .recoveryCodes: ["pin-stdin"], .attest: ["pin-stdin"], .help: [],
    ]

    /// Parses the arguments after the program name.
    ///
    /// - Throws: a ``KeyAuthError`` with the usage code; its message is one line.
    package static func parse(_ arguments: [String]) throws(KeyAuthError) -> Command {
        guard let first = arguments.first else {
            throw usage(
                "a command is needed: register, login, token, proof, logout, status, devices, pubkey, pin, default, "
                    + "reset, requests, approve, deny, agent, recovery-codes, ssh or attest",
                nil)
        }
        switch first {
        case "--help", "-h":
            return .help(topic: nil)
        case "--version", "-V", "version":
            guard arguments.count == 1 else { throw usage("--version takes no arguments", nil) }
            return .version
        default:
            break
        }
        guard let name = CommandName(rawValue: first) else {
            if first.hasPrefix("-") { throw usage("unknown option \(first)", nil) }
            throw unknownCommand(first)
        }
        let rest = Array(arguments.dropFirst())
        if name == .help {
            guard rest.count <= 1 else { throw usage("help takes at most one command name", .help) }
            guard let topic = rest.first else { return .help(topic: nil) }
            guard let topicName = CommandName(rawValue: topic) else { throw unknownCommand(topic) }
            return .help(topic: topicName)
        }
        if rest.contains("--help") || rest.contains("-h") { return .help(topic: name) }
        let parsed = try split(rest, command: name)
        switch name {
        case .register: return .register(try registerOptions(parsed))
        case .login:
            try parsed.expectPositionals(0)
            var options = LoginOptions(account: parsed.values["account"])
            options.pinFromStandardInput = parsed.flags.contains("pin-stdin")
            options.noWait = parsed.flags.contains("no-wait")
            return .login(options)
        case .token:
            try parsed.expectPositionals(0)
            var options = TokenOptions(account: parsed.values["account"])
            options.pinFromStandardInput = parsed.flags.contains("pin-stdin")
            return .token(options)
        case .proof:
            try parsed.expectPositionals(2)
            guard parsed.positionals.count == 2 else { throw usage("proof needs METHOD and URL", .proof) }
            let method = parsed.positionals[0]
            guard !method.isEmpty, method.utf8.allSatisfy({ (0x41...0x5A).contains($0) }) else {
                throw usage("METHOD must be an HTTP method in capitals, such as GET or POST", .proof)
            }
            guard DPoPProofVerifier.normalizedURL(parsed.positionals[1]) != nil else {
                throw usage("URL must be an absolute http:// or https:// URL", .proof)
            }
            var options = ProofOptions(method: method, url: parsed.positionals[1])
            options.account = parsed.values["account"]
            options.pinFromStandardInput = parsed.flags.contains("pin-stdin")
            options.nonce = parsed.values["nonce"]
            return .proof(options)
        case .logout:
            try parsed.expectPositionals(0)
            return .logout(LogoutOptions(account: parsed.values["account"]))
        case .recoveryCodes:
            try parsed.expectPositionals(0)
            var options = RecoveryCodesOptions(account: parsed.values["account"])
            options.pinFromStandardInput = parsed.flags.contains("pin-stdin")
            return .recoveryCodes(options)
        case .attest:
            try parsed.expectPositionals(0)
            var options = AttestOptions(account: parsed.values["account"])
            options.pinFromStandardInput = parsed.flags.contains("pin-stdin")
            return .attest(options)
        case .defaultAccount:
            try parsed.expectPositionals(1)
            return .defaultAccount(account: parsed.positionals.first)
        case .pin:
            guard parsed.positionals.first == "change" else {
                throw usage("pin needs an action: `keyauth pin change`", .pin)
            }
            try parsed.expectPositionals(1)
            var options = PINChangeOptions(account: parsed.values["account"])
            options.pinFromStandardInput = parsed.flags.contains("pin-stdin")
            return .pinChange(options)
        case .status:
            try parsed.expectPositionals(0)
            var options = StatusOptions(account: parsed.values["account"])
            options.json = parsed.flags.contains("json")
            return .status(options)
        case .devices: return .devices(try devicesOptions(parsed))
        case .pubkey:
            try parsed.expectPositionals(0)
            var options = PubkeyOptions(account: parsed.values["account"])
            options.jwk = parsed.flags.contains("jwk")
            return .pubkey(options)
        case .reset:
            try parsed.expectPositionals(0)
            var options = ResetOptions(account: parsed.values["account"])
            options.localOnly = parsed.flags.contains("local-only")
            options.pinFromStandardInput = parsed.flags.contains("pin-stdin")
            options.assumeYes = parsed.flags.contains("yes")
            return .reset(options)
        case .requests:
            try parsed.expectPositionals(0)
            var options = RequestsOptions(account: parsed.values["account"])
            options.watch = parsed.flags.contains("watch")
            options.pinFromStandardInput = parsed.flags.contains("pin-stdin")
            options.json = parsed.flags.contains("json")
            // A watch never ends, so it has no one document to print.
            if options.watch && options.json {
                throw usage("--json lists once; it does not go with --watch", .requests)
            }
            return .requests(options)
        case .approve, .deny:
            return .answer(try answerOptions(parsed, decision: name == .approve ? .approve : .deny))
        case .agent: return .agent(try agentOptions(parsed))
        case .ssh: return .ssh(try sshOptions(parsed))
        case .help:
            return .help(topic: nil)
        }
    }

    /// `ssh cert [--write PATH]` and `ssh config`.
    private static func sshOptions(_ parsed: ParsedArguments) throws(KeyAuthError) -> SSHOptions {
        try parsed.expectPositionals(1)
        let action: SSHOptions.Action
        switch parsed.positionals.first {
        case "cert":
            if let path = parsed.values["write"], path.isEmpty { throw usage("--write needs a file name", .ssh) }
            action = .certificate(write: parsed.values["write"])
        case "config":
            guard parsed.values["write"] == nil else { throw usage("--write goes with `keyauth ssh cert`", .ssh) }
            action = .config
        default:
            throw usage("ssh needs an action: `keyauth ssh cert` or `keyauth ssh config`", .ssh)
        }
        var options = SSHOptions(action: action, account: parsed.values["account"])
        options.pinFromStandardInput = parsed.flags.contains("pin-stdin")
        return options
    }

    /// `approve [ID]` and `deny ID`: a request id is base64url, like a KID, and may be given by
    /// its first 8 characters or more (``IDPrefix``).
    private static func answerOptions(
        _ parsed: ParsedArguments, decision: SignInDecision
    ) throws(KeyAuthError) -> AnswerOptions {
        try parsed.expectPositionals(1)
        let id = parsed.positionals.first
        if decision == .deny, id == nil { throw usage("deny needs the request's ID", parsed.command) }
        if let id, !IDPrefix.isValid(id) {
            throw usage(
                "\"\(id)\" is not a request id: give at least its first \(IDPrefix.shortCodeLength) characters "
                    + "(base64url)", parsed.command)
        }
        var options = AnswerOptions(decision: decision, requestID: id)
        options.account = parsed.values["account"]
        options.pinFromStandardInput = parsed.flags.contains("pin-stdin")
        return options
    }

    /// `unknown command "regster"; did you mean register?`: the nearest command suggested.
    private static func unknownCommand(_ word: String) -> KeyAuthError {
        let nearest = NearestWord.nearest(to: word, among: CommandName.allCases.map(\.rawValue))
        return usage("unknown command \"\(word)\"" + (nearest.map { "; did you mean \($0)?" } ?? ""), nil)
    }

    /// A usage error whose message ends with where to read more.
    static func usage(_ message: String, _ command: CommandName?) -> KeyAuthError {
        let help = command.map { "keyauth \($0.rawValue) --help" } ?? "keyauth --help"
        return KeyAuthError(.usage, "\(message) (see `\(help)`)")
    }

    /// Options and positionals of one command line.
    struct ParsedArguments {
        let command: CommandName
        var values: [String: String] = [:]
        var flags: Set<String> = []
        var positionals: [String] = []

        func expectPositionals(_ allowed: Int) throws(KeyAuthError) {
            guard positionals.count <= allowed else {
                throw CommandParser.usage("unexpected argument \"\(positionals[allowed])\"", command)
            }
        }
    }

    private static func split(_ arguments: [String], command: CommandName) throws(KeyAuthError) -> ParsedArguments {
        let syntax = ArgumentSyntax.keyauth(
            valueOptions: valueOptions[command] ?? [], flags: flagOptions[command] ?? [])
        let split: KeyAuthArguments.ParsedArguments
        do {
            split = try ArgumentParser.parse(arguments, syntax: syntax) { parsed, argument in
                // A KID is base64url and may start with "-" or "--": after `approve` or `revoke`
                // the next argument is the KID unless it names one of this command's options.
                (command == .devices && parsed.positionals.count == 1
                    && ["approve", "revoke"].contains(parsed.positionals[0])
                    || (command == .approve || command == .deny) && parsed.positionals.isEmpty)
                    && !isOption(argument, syntax: syntax)
            }
        } catch {
            throw usage(message(for: error, command: command), command)
        }
        return ParsedArguments(
            command: command, values: split.values, flags: Set(split.flags.keys), positionals: split.positionals)
    }

    /// The usage message for a command line the parser refused.
    private static func message(for error: ArgumentError, command: CommandName) -> String {
        switch error {
        case .unknownOption(let option):
            "unknown option \(option) for `keyauth \(command.rawValue)`"
                + NearestWord.optionSuggestion(
                    for: option, among: (valueOptions[command] ?? []).union(flagOptions[command] ?? []))
        case .missingValue(let name): "--\(name) needs a value"
        case .emptyValue(let name): "--\(name) needs a non-empty value"
        case .repeated(let name): "--\(name) is given more than once"
        case .flagTakesNoValue(let name), .invalidBoolean(let name): "--\(name) takes no value"
        }
    }

    /// Whether `argument` is `--name` or `--name=value` for an option of the command.
    private static func isOption(_ argument: String, syntax: ArgumentSyntax) -> Bool {
        guard argument.hasPrefix("--") else { return false }
        let name = argument.dropFirst(2).split(separator: "=", maxSplits: 1).first.map(String.init) ?? ""
        return syntax.valueOptions.contains(name) || syntax.flags.contains(name)
    }

    private static func agentOptions(_ parsed: ParsedArguments) throws(KeyAuthError) -> AgentOptions {
        try parsed.expectPositionals(0)
        let lock = parsed.flags.contains("lock")
        let stop = parsed.flags.contains("stop")
        guard !(lock && stop) else { throw usage("--lock and --stop exclude each other", .agent) }
        var options = AgentOptions(action: lock ? .lock : stop ? .stop : .start)
        let startFlags = ["pin-stdin", "background", "serve-locked"]
        if options.action != .start,
            let extra = ["account", "timeout"].first(where: { parsed.values[$0] != nil })
                ?? startFlags.first(where: parsed.flags.contains)
        {
            throw usage("--\(extra) is for starting an agent, not with --lock or --stop", .agent)
        }
        options.background = parsed.flags.contains("background")
        options.servesLocked = parsed.flags.contains("serve-locked")
        guard !(options.background && options.servesLocked) else {
            throw usage("--background and --serve-locked exclude each other", .agent)
        }
        options.account = parsed.values["account"]
        options.pinFromStandardInput = parsed.flags.contains("pin-stdin")
        if let text = parsed.values["timeout"] {
            guard let seconds = AgentOptions.seconds(fromDuration: text) else {
                throw usage("--timeout must be a duration such as 8h, 30m, 1h30m or 90s", .agent)
            }
            options.timeout = seconds
        }
        return options
    }

    private static func registerOptions(_ parsed: ParsedArguments) throws(KeyAuthError) -> RegisterOptions {
        try parsed.expectPositionals(0)
        guard let server = parsed.values["server"] else { throw usage("register needs --server URL", .register) }
        guard let user = parsed.values["user"] else { throw usage("register needs --user NAME", .register) }
        let insecureHTTP = parsed.flags.contains("insecure-http")
        let serverURL: String
        do {
            serverURL = try KeyAuthClient.normalizedServerURL(server, allowInsecureHTTP: insecureHTTP)
        } catch {
            throw usage("--server: \(error.message)", .register)
        }
        guard InputRules.isValidUser(user) else {
            throw usage("--user must be \(InputRules.userRule)", .register)
        }
        var options = RegisterOptions(serverURL: serverURL, user: user)
        // Remembered only where it matters, so that an https or loopback account never carries it.
        options.insecureHTTP = insecureHTTP && (try? KeyAuthClient.normalizedServerURL(server)) == nil
        if let name = parsed.values["name"] {
            do {
                options.deviceName = try NameRule.deviceName.normalize(name)
            } catch {
                throw usage("--name \(error)", .register)
            }
        }
        if let bits = parsed.values["bits"] {
            guard let value = Int(bits), [2048, 3072, 4096].contains(value) else {
                throw usage("--bits must be 2048, 3072 or 4096", .register)
            }
            options.bits = value
        }
        if let keyStore = parsed.values["key-store"], keyStore != "auto" {
            guard let kind = KeyStore.Kind(rawValue: keyStore) else {
                throw usage("--key-store must be tpm, file or auto", .register)
            }
            options.keyStore = kind
        }
        if let presence = parsed.values["presence"] {
            guard let kind = PresenceKind(rawValue: presence) else {
                throw usage("--presence must be pin, pam or none", .register)
            }
            options.presence = kind
        }
        if let service = parsed.values["pam-service"] {
            guard options.presence == .pam else { throw usage("--pam-service needs --presence pam", .register) }
            guard !service.contains("/"), service != ".", service != ".." else {
                throw usage("--pam-service must be a plain service name", .register)
            }
            options.pamService = service
        }
        if parsed.flags.contains("pin-stdin"), options.presence == .none {
            throw usage("--pin-stdin has no use with --presence none", .register)
        }
        if let account = parsed.values["account"] {
            guard AccountStore.isValidAccountName(account) else {
                throw usage("--account must be letters, digits and . _ @ : - (not starting with a dot)", .register)
            }
            options.account = account
        }
        if parsed.values["enrollment-code"] != nil, parsed.values["recovery-code"] != nil {
            throw usage("give --enrollment-code or --recovery-code, not both", .register)
        }
        if parsed.values["enrollment-code"] == "-" {
            options.enrollmentCodeFromStandardInput = true
        } else {
            options.enrollmentCode = parsed.values["enrollment-code"]
        }
        if parsed.values["recovery-code"] == "-" {
            options.recoveryCodeFromStandardInput = true
        } else {
            options.recoveryCode = parsed.values["recovery-code"]
        }
        options.pinFromStandardInput = parsed.flags.contains("pin-stdin")
        options.noWait = parsed.flags.contains("no-wait")
        return options
    }

    private static func devicesOptions(_ parsed: ParsedArguments) throws(KeyAuthError) -> DevicesOptions {
        var options = DevicesOptions()
        options.account = parsed.values["account"]
        options.pinFromStandardInput = parsed.flags.contains("pin-stdin")
        options.json = parsed.flags.contains("json")
        let positionals = parsed.positionals
        switch positionals.first {
        case nil, "list"?:
            try parsed.expectPositionals(1)
        case let action? where action == "approve" || action == "revoke":
            if options.json { throw usage("--json is only for `keyauth devices list`", .devices) }
            guard positionals.count >= 2 else {
                guard action == "approve" else { throw usage("devices revoke needs a KID", .devices) }
                options.action = .choosePending
                return options
            }
            try parsed.expectPositionals(2)
            let keyID = positionals[1]
            guard DeviceMatch.isValidPrefix(keyID) else {
                throw usage(
                    "\"\(keyID)\" is not a device id: give at least its first \(DeviceMatch.shortCodeLength) "
                        + "characters (base64url)", .devices)
            }
            options.action = action == "approve" ? .approve(keyID: keyID) : .revoke(keyID: keyID)
        case let other?:
            throw usage("unknown devices action \"\(other)\"; use list, approve [KID] or revoke KID", .devices)
        }
        return options
    }
}
