import KeyAuth

/// The CAs of this key file that are gone for good: each previous CA that `ssh-ca retire`
/// removed or a later `ssh-ca rotate` replaced, whose key the revocation list revokes itself.
///
/// A host that once put a CA's line in `TrustedUserCAKeys` keeps trusting it until someone edits
/// that file; if the old CA's private key leaked, its thief could sign certificates those hosts
/// accept. `sshd` checks the key that signed a certificate against `RevokedKeys` too, so naming
/// the retired CA's key there refuses all its certificates at every host that fetches the list.
///
/// Kept in `KEYFILE.retired`, a small JSON document guarded like the key file (0600, the
/// server's own, refused when looser): whoever can rewrite it can drop a revocation.
package struct SSHRetiredAuthorities: Sendable, Equatable {
    /// One retired CA.
    package struct Authority: Sendable, Equatable {
        /// Its public key in the SSH wire format.
        package let publicKeyBlob: [UInt8]
        /// When it was retired, seconds since 1970.
        package let retiredAt: Int64
    }

    /// The retired CAs, oldest first, each key once.
    package private(set) var authorities: [Authority] = []

    /// No retired CA.
    package init() {}

    /// Where the retired CAs of the key file `keyFile` are kept.
    package static func path(besides keyFile: String) -> String { keyFile + ".retired" }

    /// The public keys of the retired CAs.
    package var publicKeyBlobs: [[UInt8]] { authorities.map(\.publicKeyBlob) }

    /// These and `blob`, retired at `time` (no change when it is retired already).
    func adding(_ blob: [UInt8], retiredAt time: Int64) -> SSHRetiredAuthorities {
        var result = self
        if !authorities.contains(where: { $0.publicKeyBlob == blob }) {
            result.authorities.append(Authority(publicKeyBlob: blob, retiredAt: time))
        }
        return result
    }

    /// The file's content: `{"retired": [{"public_key": "TYPE BASE64", "retired_at": N}, ...]}`.
    func encoded() -> [UInt8] {
        let entries = authorities.map { authority -> JSONValue in
            .object([
                "public_key": .string(SSHPreviousAuthority.line(ofPublicKey: authority.publicKeyBlob)),
                "retired_at": .integer(authority.retiredAt),
            ])
        }
        return Array((JSONValue.object(["retired": .array(entries)]).serialized() + "\n").utf8)
    }

    /// The document `encoded()` writes, checked: each key a CA type's, and each once.
    static func decode(_ bytes: [UInt8]) -> SSHRetiredAuthorities? {
        guard let document = try? JSONValue(parsing: bytes), let entries = document["retired"]?.arrayValue else {
            return nil
        }
        var result = SSHRetiredAuthorities()
        for entry in entries {
            guard let line = entry["public_key"]?.stringValue,
                let blob = SSHPreviousAuthority.publicKeyBlob(ofLine: line),
                let retiredAt = entry["retired_at"]?.integerValue,
                !result.authorities.contains(where: { $0.publicKeyBlob == blob })
            else { return nil }
            result.authorities.append(Authority(publicKeyBlob: blob, retiredAt: retiredAt))
        }
        return result
    }

    /// The retired CAs of `keyFile`; none when the file is not there.
    ///
    /// - Throws: `KeyAuthError` naming the file: `.keyUnprotected` (a symlink, another user's
    ///   file, group or other permission bits), `.keyCorrupt` (not such a document).
    package static func load(besides keyFile: String) throws(KeyAuthError) -> SSHRetiredAuthorities {
        try SSHPreviousAuthority.readGuarded(
            path(besides: keyFile), as: "a list of retired SSH CAs as ssh-ca retire writes it", decode)
            ?? SSHRetiredAuthorities()
    }

    /// Writes these CAs and `blob`, retired at `time`, as the retired CAs of `keyFile` (0600,
    /// atomically), before anything else changes: a CA that leaves the published lines is
    /// revoked first. Nothing is written when `blob` is retired already.
    ///
    /// - Throws: `.storageFailed` when the file cannot be written.
    func retire(_ blob: [UInt8], at time: Int64, besides keyFile: String) throws(KeyAuthError) {
        let updated = adding(blob, retiredAt: time)
        guard updated != self else { return }
        try SecureFile.write(updated.encoded(), to: Self.path(besides: keyFile))
    }
}
