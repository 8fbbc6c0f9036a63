import Glibc
import KeyAuth

/// Which principals a user's SSH certificates carry besides the user's name
/// (`--ssh-principals-file`): per user, and per group of users, since keyauth has no groups of
/// its own.
///
/// The file has one rule a line; `#` starts a comment, blank lines are skipped, and repeated
/// rules add up:
///
///     user alice: deploy backup      # alice's certificates also name deploy and backup
///     group ops: monitoring          # every member of ops gets monitoring
///     members ops: alice bob         # alice and bob are in ops
///
/// Lists are separated by spaces or commas. A host decides what each principal may do
/// (`AuthorizedPrincipalsFile`), so the file decides who may log in where: it is refused when
/// anyone but its owner (root or the server's user) may write it.
struct SSHPrincipalMap: Sendable, Equatable {
    /// The most principals one certificate carries.
    static let maximumPrincipals = 256
    /// The longest principal.
    static let maximumPrincipalLength = 256
    /// The most bytes of principals one certificate carries (a principal that would pass it is
    /// left out): its line, base64, must stay within what `keyauth ssh cert` and the agent read
    /// (64 KiB).
    static let maximumPrincipalBytes = 16 * 1024

    private var users: [String: [String]] = [:]
    private var groups: [String: [String]] = [:]
    /// Each user's groups, in the order the file names them.
    private var memberships: [String: [String]] = [:]
    /// Every principal a rule grants: roles, which a user's own name does not confer.
    private var roles: Set<String> = []

    /// The map of no rules: certificates name the user only.
    init() {}

    /// The principals of `user`'s certificates: the user's name, the user's own, then each
    /// group's in the order the file names the groups; each once, at most
    /// ``maximumPrincipals`` and ``maximumPrincipalBytes``.
    ///
    /// The user's name is left out when a rule grants it as a role (`group deployers: deploy`)
    /// and no rule grants it to this user: a keyauth user who happened to be named `deploy`
    /// would otherwise log in wherever the role does. The list may then be empty, which no
    /// certificate may be (``SSHCertificateIssuer`` refuses it).
    func principals(for user: String) -> [String] {
        let (ownName, mapped) = grants(to: user)
        var result: [String] = []
        var seen: Set<String> = []
        var bytes = 0
        for principal in ownName + mapped
        where result.count < Self.maximumPrincipals && bytes + principal.utf8.count <= Self.maximumPrincipalBytes
            && seen.insert(principal).inserted
        {
            result.append(principal)
            bytes += principal.utf8.count
        }
        return result
    }

    /// Every principal the rules grant `user`, without the caps of ``principals(for:)``: what
    /// a certificate issued before may still carry. An edit that only reorders the rules, or adds
    /// some, can push a principal still granted past the caps; a certificate that names it is not
    /// revoked for that.
    func granted(to user: String) -> Set<String> {
        let (ownName, mapped) = grants(to: user)
        return Set(ownName + mapped)
    }

    /// The user's own name (unless a role, as ``principals(for:)`` says) and the mapped
    /// principals, in order, with repeats.
    private func grants(to user: String) -> (ownName: [String], mapped: [String]) {
        let mapped = (users[user] ?? []) + (memberships[user] ?? []).flatMap { groups[$0] ?? [] }
        return (roles.contains(user) && !mapped.contains(user) ? [] : [user], mapped)
    }

    /// Reads the rules of `text`.
    ///
    /// - Throws: `KeyAuthError` `.invalidArgument` naming the line: an unknown rule, a rule
    ///   without a name or a list, a principal with a space, comma, `#`, wildcard (`*`, `?`,
    ///   `!`) or a character outside printable ASCII, or longer than 256 bytes; a `user` rule's
    ///   name or a member that is not a user name (``InputRules/isValidUser(_:)``); members of a
    ///   group that has no `group` rule (a typo would silently give nothing).
    init(parsing text: String) throws(KeyAuthError) {
        var memberLines: [String: Int] = [:]
        // Split by scalar, not by Character: "\r\n" is one Character, which "\n" does not match,
        // so a file with CRLF line endings read as one line cut at its first "#". A line's
        // trailing "\r" is dropped.
        for (index, scalars) in text.unicodeScalars.split(separator: "\n", omittingEmptySubsequences: false)
            .enumerated()
        {
            let number = index + 1
            var rawLine = String(String.UnicodeScalarView(scalars))
            if rawLine.unicodeScalars.last == "\r" { rawLine.unicodeScalars.removeLast() }
            // The comment is cut by scalar too: "#" followed by a combining mark is one
            // Character, which a Character search passes over, keeping the comment as rules.
            let uncommented = String(String.UnicodeScalarView(rawLine.unicodeScalars.prefix { $0 != "#" }))
            let line = uncommented[...].trimmingWhitespace()
            if line.isEmpty { continue }
            guard let colon = line.firstIndex(of: ":") else {
                throw Self.error(number, "expected user NAME: ..., group NAME: ... or members GROUP: ...")
            }
            let head = line[..<colon].split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
            let list = line[line.index(after: colon)...].split(whereSeparator: { " \t,".contains($0) }).map(String.init)
            guard head.count == 2, !list.isEmpty else {
                throw Self.error(number, "expected a rule, a name, a colon and a list")
            }
            // A user's name that no keyauth user can have is a mistake, never a match.
            if head[0] == "user" || head[0] == "members",
                let name = (head[0] == "user" ? [head[1]] : list).first(where: { !InputRules.isValidUser($0) })
            {
                throw Self.error(number, "\(name) is not a user name (\(InputRules.userRule))")
            }
            switch head[0] {
            case "user":
                users[head[1], default: []] += try list.map { principal throws(KeyAuthError) in
                    try Self.checked(principal, line: number)
                }
            case "group":
                groups[head[1], default: []] += try list.map { principal throws(KeyAuthError) in
                    try Self.checked(principal, line: number)
                }
            case "members":
                for user in list where !(memberships[user]?.contains(head[1]) ?? false) {
                    memberships[user, default: []].append(head[1])
                }
                memberLines[head[1]] = memberLines[head[1]] ?? number
            default:
                throw Self.error(number, "unknown rule \(head[0]); expected user, group or members")
            }
        }
        if let (group, number) = memberLines.filter({ groups[$0.key] == nil }).min(by: { $0.value < $1.value }) {
            throw Self.error(number, "group \(group) has members but no principals (add group \(group): ...)")
        }
        roles = Set(users.values.joined()).union(groups.values.joined())
    }

    /// Reads the file at `path`.
    ///
    /// - Throws: `KeyAuthError` naming `--ssh-principals-file`: `.keyNotFound`, `.keyUnprotected`
    ///   (a symlink, not a regular file, another owner than root or the server's user, writable by
    ///   group or others), `.storageFailed`, or the parse errors of ``init(parsing:)``.
    static func load(file path: String) throws(KeyAuthError) -> SSHPrincipalMap {
        let bytes = try SecureFile.readTrusted(path, label: "--ssh-principals-file", limit: 1 << 20)
        do {
            return try SSHPrincipalMap(parsing: String(decoding: bytes, as: UTF8.self))
        } catch {
            throw KeyAuthError(error.code, "--ssh-principals-file: \(path): \(error.message)")
        }
    }

    private static func checked(_ principal: String, line: Int) throws(KeyAuthError) -> String {
        let bytes = Array(principal.utf8)
        guard bytes.count <= maximumPrincipalLength,
            bytes.allSatisfy({ (0x21...0x7E).contains($0) && !"#*?!,".utf8.contains($0) })
        else {
            throw error(
                line,
                "a principal is printable ASCII without spaces, commas, #, *, ? or !, at most "
                    + "\(maximumPrincipalLength) bytes")
        }
        return principal
    }

    private static func error(_ line: Int, _ message: String) -> KeyAuthError {
        KeyAuthError(.invalidArgument, "line \(line): \(message)")
    }
}
