import Foundation
import KeyAuth

#if canImport(Glibc)
    import Glibc
#endif

/// `keyauth-pam-helper`: the process `pam_keyauth.so` starts to log a Linux user in with their
/// keyauth device key.
///
/// The work lives here, not in the module, so that the Swift runtime never runs inside sshd,
/// sudo or login. The helper reads the module's request, maps the Linux user to a keyauth
/// account (as root only for the mapping file), drops to the user's own uid before it reads
/// anything of theirs, answers `pin PROMPT`, reads the PIN, and logs in to the server exactly as
/// `keyauth login` does. Its one final line is `ok ...`, `refused REASON`, `unknown REASON` or
/// `unavailable REASON` (docs/PROTOCOL.md, "Host login").
package struct PAMHelper: Sendable {
    /// The name `keyauth` answers to as the helper: the package installs
    /// `/usr/libexec/keyauth/keyauth-pam-helper` as a link to `/usr/bin/keyauth`.
    package static let programName = "keyauth-pam-helper"

    /// Whether a process's first argument names it as the helper (by path or by name alone).
    package static func isProgramName(_ argument: String?) -> Bool {
        guard let argument else { return false }
        return argument == programName || argument.hasSuffix("/" + programName)
    }
    /// The mapping file read when the request names none.
    package static let defaultUsersFile = "/etc/keyauth/pam-users"
    /// The keyauth home when the request names none: the keyauth command's own default for a
    /// user without `XDG_DATA_HOME`.
    package static let defaultHome = "~/.local/share/keyauth"
    /// Seconds each request to the server may take, when the module waits `answerTimeout` seconds
    /// for the answer after the PIN: a third of that less a second (after the PIN come at most
    /// three requests: discovery, the token, and the token again with a DPoP nonce), 1 to 5 s. A
    /// server too slow for it fails over to the offline grant while the module still waits.
    package static func networkTimeout(answerTimeout: Int) -> TimeInterval {
        min(5, max(1, Double(answerTimeout - 1) / 3))
    }

    /// The descriptor the request and the PIN come from; answers go to ``output``.
    let input: Int32
    let output: Int32

    /// Creates a helper on the module's socket (standard input and output).
    package init(input: Int32 = STDIN_FILENO, output: Int32 = STDOUT_FILENO) {
        self.input = input
        self.output = output
    }

    /// One final answer of the helper.
    package enum Answer: Equatable, Sendable {
        case ok(String)
        case refused(String)
        case unknown(String)
        case unavailable(String)

        /// The answer's line, without control or format characters (they would forge lines in the
        /// journal, or reach a terminal as escapes),
        /// and at most ``maximumLineBytes`` bytes of UTF-8, cut between characters: the module
        /// refuses a line over 1023 bytes, and 900 characters of other scripts can be 3,600.
        package var line: String {
            let (word, text): (String, String) =
                switch self {
                case .ok(let detail): ("ok", detail)
                case .refused(let reason): ("refused", reason)
                case .unknown(let reason): ("unknown", reason)
                case .unavailable(let reason): ("unavailable", reason)
                }
            // C1 controls and bidirectional overrides too: pam_error shows the line on the
            // terminal of sudo, su or login, which filter nothing.
            let clean = String(
                String.UnicodeScalarView(text.unicodeScalars.map { OAuthError.isUnprintable($0) ? " " : $0 }))
            var line = ""
            var bytes = 0
            for character in word + " " + clean {
                bytes += character.utf8.count
                guard bytes <= Self.maximumLineBytes else { break }
                line.append(character)
            }
            return line
        }

        /// The longest answer line, in bytes, newline not counted.
        package static let maximumLineBytes = 900
    }

    /// Runs one login and writes its answer; the exit status is 0 when the login succeeded.
    package func run() async -> Int32 {
        let answer = await login()
        DescriptorIO.writeAll(output, answer.line + "\n")
        if case .ok = answer { return 0 }
        return 1
    }

    /// The whole exchange up to the final answer.
    func login() async -> Answer {
        let request: PAMHelperRequest
        do {
            request = try PAMHelperRequest(text: try readRequest())
        } catch {
            return .refused("bad request from pam_keyauth: \(error.message)")
        }
        guard let person = LinuxUser(name: request.user) else {
            return .unknown("no Linux user \(request.user)")
        }
        if let refusal = Self.spellingRefusal(requested: request.user, database: person.name) { return refusal }
        let mapping: HostUserMapping.Entry
        do {
            mapping = try HostUserMapping.entry(for: request.user, file: request.users ?? Self.defaultUsersFile)
        } catch {
            return .refused(error.message)
        }
        // Root's file, read before root is given up: a push login's credentials, and the client
        // whose user list the server applies to a device key login too.
        let hostClient = Result { () throws(KeyAuthError) -> HostClientConfig? in
            let path = request.hostConfig ?? HostClientConfig.defaultPath
            // A screen locker runs the helper as the user, who cannot open root's 0600 file: such
            // a login unlocks the user's own session, online, without the host client (which a
            // helper running as the user could leave out anyway).
            if geteuid() != 0, access(path, R_OK) != 0, errno == EACCES { return nil }
            return try HostClientConfig.load(path: path)
        }
        // Root's part of offline grants, before root is given up (PAMHelper+Offline.swift).
        let offline = openOfflineGrants(request)
        // Root's lock on the TPM's tries, before root is given up (PAMHelper+TPMLockout.swift).
        let tpmTryLock = Self.openTPMTryLock()
        defer { if let tpmTryLock { close(tpmTryLock) } }
        if let refusal = person.becomeUser() { return .refused(refusal) }
        if request.mode == .push {
            return await push(request, hostClient: hostClient, keyauthUser: mapping.keyauthUser)
        }
        let home = person.expand(request.home ?? Self.defaultHome)
        // A relative home would be found from the directory of whoever ran sudo or su.
        guard home.hasPrefix("/") else { return .refused("home= must expand to an absolute path") }
        var environment = [
            "HOME": person.homeDirectory, "KEYAUTH_HOME": home,
            "KEYAUTH_TIMEOUT": String(Self.networkTimeout(answerTimeout: request.answerTimeout)),
        ]
        if let tcti = request.tcti { environment[TPMConnection.environmentVariable] = tcti }
        // Holds the PIN once read, so that an offline login can use it after the online one failed.
        let pinReader = HeldPINReader(fileDescriptor: input)
        let io = CommandIO(
            writeOutput: { _ in }, writeError: { _ in }, standardInput: input, environment: environment,
            isErrorTerminal: false, terminalReader: pinReader, hostName: "")
        let context = CommandContext(io: io)
        let account: KeyAuthAccount
        switch chooseAccount(
            AccountStore(home: home), keyauthUser: mapping.keyauthUser, named: mapping.account,
            server: request.server)
        {
        case .account(let chosen): account = chosen
        case .answer(.unknown(let reason)) where request.mode == .auto:
            // No device key of this user here: a host that is a client asks one of their devices.
            if case .success(nil) = hostClient { return .unknown(reason) }
            return await push(request, hostClient: hostClient, keyauthUser: mapping.keyauthUser)
        case .answer(let answer): return answer
        }
        switch account.presence {
        case .pin: break
        case .pam:
            // Asking PAM from inside a PAM module would run this module again.
            return .refused(
                "account \(account.name) is protected by PAM, which would call pam_keyauth again; register one with a PIN"
            )
        default:
            return .refused("account \(account.name) has no PIN, so anyone at the session could use it")
        }
        let tpmKey: TPMKey?
        switch Self.keyProtection(account, in: AccountStore(home: home)) {
        case .refused(let refusal): return .refused(refusal)
        case .needsPIN(let key): tpmKey = key
        }
        // A refused pam.conf refuses: without it the server could not apply the host's user list.
        let hostClientID: String?
        switch hostClient {
        case .success(let loaded): hostClientID = loaded?.clientID
        case .failure(let error): return .refused(error.message)
        }
        var lockoutNote = ""
        if account.keyStore == .tpm {
            let tpm = try? context.tpmConnection()
            switch Self.tpmLockoutState(try? tpm?.info()) {
            case .locked(let reason): return .refused(reason)
            case .ask(let note): lockoutNote = note
            }
            // Opening the session says what is wrong with a key or TPM that fails here.
            if let key = tpmKey, let tpm {
                let lockWait = Self.tpmTryLockWait(answerTimeoutSeconds: request.answerTimeout)
                pinReader.checkEachPIN { pin throws(KeyAuthError) in
                    try Self.spendPINTry(pin, key: key, on: tpm, lock: tpmTryLock, lockWait: lockWait)
                }
            }
        }
        DescriptorIO.writeAll(output, "pin keyauth PIN for \(account.user) (\(account.name))\(lockoutNote): \n")
        pinReader.noteAsked()
        let session: AccountSession
        let token: AccessToken
        do {
            // The PIN comes from the module's socket through pinReader: one answer, as with
            // --pin-stdin (a second prompt in one login finds the input ended).
            // The record chooseAccount checked, not the file read again: the file is the user's.
            session = try AccountSession.open(
                context: context, checked: account, pinFromStandardInput: false, waitForApproval: false,
                extraClaims: try Self.hostLoginClaims(
                    request, hostClientID: hostClientID, keyauthUser: mapping.keyauthUser))
        } catch {
            return Self.answer(for: error)
        }
        do {
            token = try await session.login()
        } catch {
            return await afterFailedLogin(
                error, offline: offline, session: session, pinReader: pinReader, request: request)
        }
        let renewal = await renewOfflineGrant(
            token, offline: offline, session: session, request: request, pinArrivedAt: pinReader.arrivedAt)
        return .ok("account \(account.name) key \(account.keyID ?? "unknown") service \(request.service)\(renewal)")
    }

    /// The refusal of an account whose device key opens without a PIN, or nil.
    ///
    /// The account file's `presence` is the user's to edit: set to `pin` over a key made without
    /// one, any PIN typed would have "opened" the key, which ignores a PIN it does not need. Only
    /// the key itself shows that the PIN guards it: a key file encrypted with it, a TPM key with
    /// an authorization value (the TPM refuses a PIN that does not match, so a blob claiming one
    /// falsely cannot sign). A key that does need its PIN cannot be replaced by one that does not
    /// without its plaintext, which only the PIN gives.
    static func keyWithoutPINRefusal(_ account: KeyAuthAccount, in accounts: AccountStore) -> String? {
        guard case .refused(let refusal) = keyProtection(account, in: accounts) else { return nil }
        return refusal
    }

    /// What ``keyWithoutPINRefusal(_:in:)`` finds, with the TPM key it read (nil for a key file
    /// or no key), so that the login reads the key once.
    enum KeyProtection {
        case refused(String)
        case needsPIN(TPMKey?)
    }

    static func keyProtection(_ account: KeyAuthAccount, in accounts: AccountStore) -> KeyProtection {
        let needsPIN: Bool
        var tpmKey: TPMKey?
        do throws(KeyAuthError) {
            let keys = try accounts.keyPairStore(for: account.name)
            switch keys.storedKind {
            case .tpm?:
                let key = try keys.loadTPMKey().key
                needsPIN = key.requiresPIN
                tpmKey = key
            case .file?: needsPIN = try keys.isEncrypted()
            // No key at all: opening the session says what is missing.
            case nil: return .needsPIN(nil)
            }
        } catch {
            return .refused(error.message)
        }
        return needsPIN
            ? .needsPIN(tpmKey)
            : .refused(
                "account \(account.name)'s device key opens without a PIN, so anyone at the session could use it")
    }

    /// The refusal of a user name that the password database spells otherwise, byte for byte,
    /// or nil. A name service that ignores case (SSSD, winbind) finds `alice` for `ALICE`; the
    /// mapping file and the server's `keyauth_user` check know users by one spelling, and the
    /// other would be mapped apart, by default to a keyauth user of that spelling.
    static func spellingRefusal(requested: String, database: String) -> Answer? {
        guard !requested.isSameBytes(as: database) else { return nil }
        return .refused("the Linux user \(requested) is spelled \(database) in the password database; log in as that")
    }

    /// This host's name, as the login states it and offline grants name it.
    static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        let host =
            gethostname(&buffer, buffer.count - 1) == 0
            ? String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : ""
        return host.isEmpty ? "unknown" : host
    }

    /// The statement the server writes to its audit trail: this host, the PAM service, the
    /// Linux user, and the host's client id when it is a client of the server, whose user list
    /// the server then applies (docs/PROTOCOL.md section 2, `host_login`); and the keyauth user
    /// root's mapping names, whose devices alone the server then admits. The account comes from
    /// the user's own home, which anything running as the user can replace with an account of
    /// another keyauth user (an attacker's own), PIN and all.
    static func hostLoginClaims(
        _ request: PAMHelperRequest, hostClientID: String? = nil, keyauthUser: String? = nil
    ) throws(KeyAuthError) -> JWTClaims {
        var members: [String: JSONValue] = [
            "host": .string(hostName()), "service": .string(request.service),
            "linux_user": .string(request.user),
        ]
        if let hostClientID { members["host_client"] = .string(hostClientID) }
        if let keyauthUser { members["keyauth_user"] = .string(keyauthUser) }
        let statement = JSONValue.object(members)
        var claims = JWTClaims()
        try claims.setJSON("host_login", json: statement.serialized())
        return claims
    }

    /// A network that cannot be reached is `unavailable`; everything else is a refusal.
    static func answer(for error: KeyAuthError) -> Answer {
        let reason = "\(error.code): \(error.message)"
        switch error.code {
        case .transportFailed, .keySetUnavailable: return .unavailable(reason)
        default: return .refused(reason)
        }
    }

    /// The account a login uses, or the answer that ends it without one.
    enum AccountChoice {
        case account(KeyAuthAccount)
        case answer(Answer)
    }

    /// The one account of the home that belongs to `keyauthUser` on `server`.
    func chooseAccount(_ store: AccountStore, keyauthUser: String, named: String?, server: String)
        -> AccountChoice
    {
        let wanted = (try? KeyAuthClient.normalizedServerURL(server, allowInsecureHTTP: true)) ?? server
        var matches: [KeyAuthAccount] = []
        for name in store.accountNames() where named.map({ $0.isSameBytes(as: name) }) ?? true {
            guard let account = try? store.load(name) else { continue }
            let theirs =
                (try? KeyAuthClient.normalizedServerURL(account.serverURL, allowInsecureHTTP: true))
                ?? account.serverURL
            // The server comes from root's configuration: an account the user pointed elsewhere
            // (their own server, which would say yes to anything) is not a way in.
            if theirs.isSameBytes(as: wanted) && account.user.isSameBytes(as: keyauthUser) { matches.append(account) }
        }
        if matches.count == 1, let only = matches.first { return .account(only) }
        if matches.isEmpty {
            return .answer(.unknown("no keyauth account of \(keyauthUser) on \(wanted) in \(store.home)"))
        }
        if let chosen = (try? store.defaultAccountName()).flatMap({ name in matches.first { $0.name == name } }) {
            return .account(chosen)
        }
        return .answer(
            .refused("several accounts of \(keyauthUser) on \(wanted): name one in the pam-users mapping file"))
    }

    /// Reads the request up to its empty line, byte by byte so that the PIN after it stays unread.
    private func readRequest() throws(KeyAuthError) -> String {
        var bytes: [UInt8] = []
        while bytes.count < PAMHelperRequest.maximumLength {
            var byte: UInt8 = 0
            let count = read(input, &byte, 1)
            if count < 0 && errno == EINTR { continue }
            guard count == 1 else { throw KeyAuthError(.invalidArgument, "the request ended early") }
            bytes.append(byte)
            if bytes.count >= 2 && bytes[bytes.count - 2] == 0x0A && byte == 0x0A { break }
        }
        guard bytes.last == 0x0A else { throw KeyAuthError(.invalidArgument, "the request is too long") }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw KeyAuthError(.invalidArgument, "the request is not UTF-8")
        }
        return text
    }
}
