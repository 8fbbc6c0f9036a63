import Foundation

/// Stores each account's token in `<directory>/<account>/token.json`, mode 0600, replaced
/// atomically.
///
/// The file is JSON: `{"access_token": "...", "expires_at": <seconds since 1970>, "token_type":
/// "Bearer"}`. A damaged file is treated as no token (the next login replaces it), but a file
/// that others can read is refused, as for keys: it may already have leaked.
public struct FileCredentialsStore: CredentialsStore {
    /// The directory that holds one subdirectory per account.
    public let directory: String
    /// The file name inside an account's directory.
    public let fileName: String

    /// - Parameters:
    ///   - directory: holds one directory per account, created 0700 on first save.
    ///   - fileName: the token file in each account's directory.
    public init(directory: String, fileName: String = "token.json") {
        self.directory = directory
        self.fileName = fileName
    }

    /// The token file of `account`.
    ///
    /// - Throws: `.invalidArgument` for a name that could leave ``directory``.
    public func path(for account: String) throws(KeyAuthError) -> String {
        guard Self.isValidAccountName(account) else {
            throw KeyAuthError(.invalidArgument, "\"\(account)\" is not a valid account name")
        }
        return "\(directory)/\(account)/\(fileName)"
    }

    /// Whether `name` can name an account's directory: 1 to 128 characters of
    /// `[A-Za-z0-9._@:-]`, not starting with a dot, so that it can never leave ``directory``.
    public static func isValidAccountName(_ name: String) -> Bool {
        let scalars = name.unicodeScalars
        guard (1...128).contains(scalars.count), scalars.first != "." else { return false }
        return scalars.allSatisfy(isAccountNameScalar)
    }

    /// Whether `scalar` may appear in an account name.
    package static func isAccountNameScalar(_ scalar: Unicode.Scalar) -> Bool {
        ("A"..."Z").contains(scalar) || ("a"..."z").contains(scalar) || ("0"..."9").contains(scalar)
            || scalar == "." || scalar == "_" || scalar == "@" || scalar == ":" || scalar == "-"
    }

    /// Reads the token; a missing or damaged file is no token.
    public func loadToken(account: String) throws(KeyAuthError) -> AccessToken? {
        let bytes: [UInt8]
        do {
            bytes = try SecureFile.readProtected(try path(for: account))
        } catch {
            if error.code == .keyNotFound || error.code == .keyCorrupt { return nil }
            throw error
        }
        return Self.decode(bytes)
    }

    /// Writes the token atomically with mode 0600.
    public func saveToken(_ token: AccessToken, account: String) throws(KeyAuthError) {
        let file = try path(for: account)
        try SecureFile.createDirectory(SecureFile.parentDirectory(of: file))
        try SecureFile.write(Array(Self.encode(token).utf8), to: file)
    }

    /// Removes the token file.
    public func deleteToken(account: String) throws(KeyAuthError) {
        try SecureFile.remove(try path(for: account))
    }

    static func encode(_ token: AccessToken) -> String {
        JSONValue.object([
            "access_token": .string(token.value), "token_type": .string(token.tokenType),
            "expires_at": .integer(Int64(clampingSeconds: token.expiresAt.timeIntervalSince1970)),
        ]).serialized(leadingKeys: ["access_token", "token_type", "expires_at"]) + "\n"
    }

    static func decode(_ bytes: [UInt8]) -> AccessToken? {
        guard let object = try? JSONValue(parsing: bytes).objectValue,
            let value = object["access_token"]?.stringValue, !value.isEmpty,
            let expiresAt = object["expires_at"]?.integerValue
        else { return nil }
        return AccessToken(
            value: value, tokenType: object["token_type"]?.stringValue ?? "Bearer",
            expiresAt: Date(timeIntervalSince1970: TimeInterval(expiresAt)))
    }
}
