import Foundation
import KeyAuth

#if canImport(Glibc)
    import Glibc
#endif

/// The mapping file `/etc/keyauth/pam-users`: which keyauth user (and optionally which account)
/// a Linux user logs in as. One `LINUX-USER KEYAUTH-USER [ACCOUNT]` per line, `#` comments.
///
/// Without the file, or without a line for the user, the keyauth user has the Linux user's name.
/// The file decides who may become whom, so it must be root's and not writable by anyone else;
/// a looser one is refused rather than read.
enum HostUserMapping {
    /// What one Linux user maps to.
    struct Entry: Equatable {
        var keyauthUser: String
        var account: String?
    }

    /// The entry of `user` in `file`, or the same-name default when the file or the line is absent.
    ///
    /// - Throws: `.keyUnprotected` for a symbolic link or a file not owned by root or writable by
    ///   group or others (``RootFile``); `.invalidArgument` for a malformed line of that user.
    static func entry(for user: String, file: String) throws(KeyAuthError) -> Entry {
        guard let bytes = try RootFile.read(file, private: false) else { return Entry(keyauthUser: user, account: nil) }
        return try entry(for: user, text: String(decoding: bytes, as: UTF8.self), file: file)
    }

    /// The entry of `user` in the text of a mapping file.
    static func entry(for user: String, text: String, file: String) throws(KeyAuthError) -> Entry {
        // Split at "\r\n" too, which Swift takes as one Character unequal to "\n": a file saved with
        // Windows line ends would otherwise be one line, its first `#` hiding every mapping.
        for (index, line) in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated() {
            let content = line.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            let words = content.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
            // Byte for byte: Swift's == takes canonically equivalent spellings (`jose\u{301}`,
            // `josé`) as one, which would give a second Linux account the first one's line.
            guard let first = words.first, first.isSameBytes(as: user) else { continue }
            guard words.count == 2 || words.count == 3 else {
                throw KeyAuthError(
                    .invalidArgument, "\(file) line \(index + 1): expected LINUX-USER KEYAUTH-USER [ACCOUNT]")
            }
            return Entry(keyauthUser: words[1], account: words.count == 3 ? words[2] : nil)
        }
        return Entry(keyauthUser: user, account: nil)
    }
}
