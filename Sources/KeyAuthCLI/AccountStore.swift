import Foundation
import KeyAuth

/// The accounts of this machine under one keyauth home, one directory each.
///
/// Layout (directories 0700, files 0600, created on first use):
/// ```
/// <home>/default                        the default account's name
/// <home>/accounts/<name>/account.json   server, issuer, user, device, kid, presence, status
/// <home>/accounts/<name>/device-key.pem the private key, for a key file (KeyPairStore)
/// <home>/accounts/<name>/device-key.tpm the TPM's key blob, for a TPM key (KeyPairStore)
/// <home>/accounts/<name>/device-key.pub the public key
/// <home>/accounts/<name>/token.json     the current access token (FileCredentialsStore)
/// ```
/// One key per server and user keeps a compromise of one registration from touching another,
/// and lets a person hold accounts on several servers on one machine. This is the command's
/// layout, not the library's: an app keeps its key where ``KeyPairStore/default(appName:environment:)``
/// says and its tokens in a ``FileCredentialsStore`` of its own.
package struct AccountStore: Sendable {
    /// The keyauth home.
    package let home: String

    /// - Parameter home: usually ``defaultHome(environment:)``.
    package init(home: String) {
        self.home = home
    }

    /// `$KEYAUTH_HOME`, else `$XDG_DATA_HOME/keyauth`, else `~/.local/share/keyauth`.
    ///
    /// A relative `XDG_DATA_HOME` is ignored, as the XDG specification requires.
    /// - Throws: `.storageFailed` when neither variable nor `HOME` is set.
    package static func defaultHome(environment: [String: String]) throws(KeyAuthError) -> String {
        if let home = environment["KEYAUTH_HOME"], !home.isEmpty { return home }
        if let data = environment["XDG_DATA_HOME"], data.hasPrefix("/") { return data + "/keyauth" }
        if let user = environment["HOME"], !user.isEmpty { return user + "/.local/share/keyauth" }
        throw KeyAuthError(.storageFailed, "cannot find a home for keyauth: set KEYAUTH_HOME or HOME")
    }

    /// `<user>@<host[:port]>` of the server, with anything outside `[A-Za-z0-9._@:-]` made `_`.
    package static func defaultAccountName(user: String, serverURL: String) -> String {
        let components = URLComponents(string: serverURL)
        var host = components?.host ?? "server"
        if let port = components?.port { host += ":\(port)" }
        let name = String(
            String.UnicodeScalarView(
                (user + "@" + host).unicodeScalars.map { FileCredentialsStore.isAccountNameScalar($0) ? $0 : "_" }))
        return name.hasPrefix(".") ? "_" + name.dropFirst() : name
    }

    /// Whether `name` can name an account directory: the rule of ``FileCredentialsStore``, whose
    /// directories these are.
    package static func isValidAccountName(_ name: String) -> Bool {
        FileCredentialsStore.isValidAccountName(name)
    }

    /// The directory that holds one directory per account.
    package var accountsDirectory: String { home + "/accounts" }
    private var defaultFile: String { home + "/default" }

    /// The directory of account `name`.
    ///
    /// - Throws: `.invalidArgument` for a name that ``isValidAccountName(_:)`` refuses.
    package func directory(for name: String) throws(KeyAuthError) -> String {
        guard Self.isValidAccountName(name) else {
            throw KeyAuthError(
                .invalidArgument, "\"\(name)\" is not a valid account name (letters, digits and . _ @ : -)")
        }
        return accountsDirectory + "/" + name
    }

    /// The account file of `name`.
    package func accountFile(for name: String) throws(KeyAuthError) -> String {
        try directory(for: name) + "/account.json"
    }

    /// The key store of account `name`.
    ///
    /// - Parameter keyStore: where a new key goes, and the TPM that opens a TPM key.
    package func keyPairStore(for name: String, keyStore: KeyStore = .file) throws(KeyAuthError) -> KeyPairStore {
        KeyPairStore(directory: try directory(for: name), keyStore: keyStore)
    }

    /// The token store for all accounts of this home.
    package var credentials: FileCredentialsStore {
        FileCredentialsStore(directory: accountsDirectory)
    }

    /// The names of the accounts that have an account file, sorted.
    package func accountNames() -> [String] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: accountsDirectory)) ?? []
        return entries.filter { name in
            Self.isValidAccountName(name) && SecureFile.exists(accountsDirectory + "/" + name + "/account.json")
        }.sorted()
    }

    /// Whether account `name` has an account file.
    package func exists(_ name: String) -> Bool {
        guard let file = try? accountFile(for: name) else { return false }
        return SecureFile.exists(file)
    }

    /// Reads account `name`.
    ///
    /// - Throws: `.accountNotFound`; `.accountCorrupt` for a damaged file or one that names
    ///   another account; `.keyUnprotected` for a file others can write or read, or for it, its
    ///   directory or `accounts/` with group or other permissions or another owner.
    package func load(_ name: String) throws(KeyAuthError) -> KeyAuthAccount {
        let file = try accountFile(for: name)
        let bytes: [UInt8]
        do {
            bytes = try SecureFile.readProtected(file)
            // keyauth made accounts/ 0700 too: whoever can write to it can swap an account's
            // whole directory, key and all, so it is held to the rule of the directories in it.
            try SecureFile.checkProtectedDirectory(accountsDirectory)
        } catch {
            if error.code == .keyNotFound {
                throw KeyAuthError(.accountNotFound, "there is no account named \(name)")
            }
            if error.code == .keyCorrupt { throw KeyAuthError(.accountCorrupt, "\(file) is too large") }
            throw error
        }
        let account: KeyAuthAccount
        do {
            account = try KeyAuthAccount(jsonValue: try JSONValue(parsing: bytes))
        } catch let error as KeyAuthError {
            throw Self.corrupt(file, error.message, account: name)
        } catch {
            throw Self.corrupt(file, "it is not valid JSON", account: name)
        }
        guard account.name == name else {
            throw Self.corrupt(file, "it names another account", account: name)
        }
        return account
    }

    /// A damaged account file, with the ways out: nothing here can rebuild it, and `reset
    /// --local-only` is the one command that removes an account without reading it.
    private static func corrupt(_ file: String, _ reason: String, account: String) -> KeyAuthError {
        KeyAuthError(
            .accountCorrupt,
            "\(file) is corrupt: \(reason); restore it from a backup, or delete the account here with "
                + "`keyauth reset --local-only --account \(account)` and register again")
    }

    /// Writes the account file atomically, creating the directories.
    package func save(_ account: KeyAuthAccount) throws(KeyAuthError) {
        let directory = try directory(for: account.name)
        // Each directory keyauth owns is checked, not only the last: the home and accounts/ already
        // there are tightened when they are the user's and refused when they are not.
        try SecureFile.createDirectory(home)
        try SecureFile.createDirectory(accountsDirectory)
        try SecureFile.createDirectory(directory)
        try SecureFile.write(
            Array((account.jsonValue.serialized(leadingKeys: ["name"]) + "\n").utf8), to: directory + "/account.json")
    }

    /// The file in an account's directory that says a removal of the account has begun.
    static let removalMarker = ".removing"

    /// Whether a removal of account `name` began and did not finish (a kill, a file that could
    /// not be unlinked): `keyauth reset` run again finishes it here without the server.
    package func isBeingRemoved(_ name: String) -> Bool {
        guard let directory = try? directory(for: name) else { return false }
        return SecureFile.exists(directory + "/" + Self.removalMarker)
    }

    /// Deletes everything of account `name`: token, key, PIN counter, account file, directory;
    /// and forgets it as the default.
    ///
    /// The order makes a removal that stops halfway one that running it again finishes: first a
    /// marker saying the removal began, then the secrets (token, then key), then the marker, and
    /// the account file last, since it is what makes the account exist, and so what lets
    /// `keyauth reset` and `keyauth status` find what is left. The directory goes after it, with
    /// whatever else is in it (a temporary file of a write that was killed). A step that fails
    /// stops the removal there, with every later file still in place.
    package func remove(_ name: String) throws(KeyAuthError) {
        let directory = try directory(for: name)
        let marker = directory + "/" + Self.removalMarker
        if SecureFile.exists(directory + "/account.json") {
            // Best effort: the marker only helps to say what happened, and a full disk that
            // refuses even an empty file must not stop a removal that frees space.
            try? SecureFile.write([], to: marker)
        }
        try credentials.deleteToken(account: name)
        try KeyPairStore(directory: directory).reset()
        try SecureFile.remove(directory + "/.lock")
        try SecureFile.remove(marker)
        try SecureFile.remove(directory + "/account.json")
        if SecureFile.exists(directory) {
            do {
                try FileManager.default.removeItem(atPath: directory)
            } catch {
                throw KeyAuthError(.storageFailed, "cannot remove the directory \(directory)")
            }
        }
        if (try? defaultAccountName()) == name {
            try SecureFile.remove(defaultFile)
        }
    }

    /// The name in the `default` file, if any.
    ///
    /// The file decides which account `keyauth token` speaks for, so it is trusted only as
    /// ``SecureFile/readOwned(_:limit:)`` allows: in a home that nobody else owns or can write,
    /// not a symlink, at most 4 KiB.
    /// - Throws: `.keyUnprotected` for a home or file others could change; `.accountCorrupt` for
    ///   a file too large to hold a name.
    package func defaultAccountName() throws(KeyAuthError) -> String? {
        let data: [UInt8]?
        do {
            data = try SecureFile.readOwned(defaultFile, limit: Self.smallFileLimit)
        } catch {
            guard error.code == .keyCorrupt else { throw error }
            throw KeyAuthError(.accountCorrupt, "\(defaultFile) is too large to name an account")
        }
        guard let data else { return nil }
        let name = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return name.isEmpty ? nil : name
    }

    /// The largest `default` or `no-tpm` file read.
    static let smallFileLimit = 4096

    /// Where the home remembers the TCTI at which `--key-store auto` last found no TPM.
    var missingTPMFile: String { home + "/no-tpm" }

    /// Whether the reason that the TPM at `tcti` is unavailable is news to this home: true the
    /// first time (and records it), false while the home remembers it, so that a machine without
    /// a TPM is told once rather than at every registration. Best effort: a home that cannot
    /// record it tells again.
    package func isFirstNoticeOfMissingTPM(tcti: String) -> Bool {
        let line = tcti + "\n"
        // A file this home cannot vouch for remembers nothing: telling again is harmless.
        if let data = try? SecureFile.readOwned(missingTPMFile, limit: Self.smallFileLimit),
            String(decoding: data, as: UTF8.self) == line
        {
            return false
        }
        try? SecureFile.createDirectory(home)
        try? SecureFile.write(Array(line.utf8), to: missingTPMFile)
        return true
    }

    /// Forgets a missing TPM once one answers, so that losing it later is told again.
    package func forgetMissingTPM() {
        try? FileManager.default.removeItem(atPath: missingTPMFile)
    }

    /// Makes `name` the default account.
    package func setDefaultAccount(_ name: String) throws(KeyAuthError) {
        _ = try directory(for: name)
        try SecureFile.createDirectory(home)
        try SecureFile.write(Array((name + "\n").utf8), to: defaultFile)
    }

    /// The account a command means: `explicit` when given, else the default account when it
    /// exists, else the only account.
    ///
    /// `explicit` may be shortened to the start of an account name that ends before an `@` or a
    /// `:` (`alice` or `alice@host` for `alice@host:8088`), as long as one account matches.
    /// - Throws: `.accountNotFound` when there is no account (or not the one named), listing the
    ///   accounts that exist; `.invalidArgument` when several accounts exist and none is the
    ///   default, or a short name matches several (listing them).
    package func resolve(_ explicit: String?) throws(KeyAuthError) -> String {
        if let explicit {
            _ = try directory(for: explicit)
            if exists(explicit) { return explicit }
            let names = accountNames()
            let matches = names.filter { name in
                name.hasPrefix(explicit + "@") || name.hasPrefix(explicit + ":")
            }
            if matches.count == 1, let only = matches.first { return only }
            guard matches.isEmpty else {
                throw KeyAuthError(
                    .invalidArgument,
                    "\(explicit) matches \(matches.count) accounts: \(matches.joined(separator: ", ")); "
                        + "give --account one of them")
            }
            let existing = names.isEmpty ? "there are none yet" : "the accounts are \(names.joined(separator: ", "))"
            throw KeyAuthError(.accountNotFound, "there is no account named \(explicit); \(existing)")
        }
        if let name = try defaultAccountName(), exists(name) { return name }
        let names = accountNames()
        if names.count == 1, let only = names.first { return only }
        if names.isEmpty {
            throw KeyAuthError(
                .accountNotFound, "there is no account yet: run `keyauth register --server URL --user NAME`")
        }
        throw KeyAuthError(
            .invalidArgument, "there are \(names.count) accounts and no default: choose one with --account NAME")
    }
}
