import KeyAuth

/// The CA that `keyauth-server ssh-ca rotate` replaced: published beside the new one (in
/// `GET /v1/ssh/ca`, `ssh-ca show` and the revocation list) until `ssh-ca retire` or the end of
/// the overlap, so that hosts keep accepting the certificates it signed while they pick up the
/// new line.
///
/// Only its public key is kept: nothing signs with it any more, and the revocation list names a
/// CA by its public key. It lives beside the CA key file, in `KEYFILE.previous`, a small JSON
/// document guarded like the key file (0600, the server's own, refused when looser): whoever
/// can write it chooses a key that hosts trust.
package struct SSHPreviousAuthority: Sendable, Equatable {
    /// The CA's public key in the SSH wire format.
    package let publicKeyBlob: [UInt8]
    /// When it was replaced, seconds since 1970.
    package let rotatedAt: Int64
    /// When it stops being published, seconds since 1970.
    package let publishedUntil: Int64

    /// The key types a CA of this server can have.
    static let keyTypeNames = ["ssh-ed25519", "ecdsa-sha2-nistp256", "ssh-rsa"]

    /// Keeps `authority`'s public key, published from `rotatedAt` until `publishedUntil`.
    package init(replacing authority: SSHCertificateAuthority, rotatedAt: Int64, publishedUntil: Int64) {
        self.publicKeyBlob = authority.publicKeyBlob
        self.rotatedAt = rotatedAt
        self.publishedUntil = publishedUntil
    }

    private init(publicKeyBlob: [UInt8], rotatedAt: Int64, publishedUntil: Int64) {
        self.publicKeyBlob = publicKeyBlob
        self.rotatedAt = rotatedAt
        self.publishedUntil = publishedUntil
    }

    /// Where the previous CA of the key file `keyFile` is kept.
    package static func path(besides keyFile: String) -> String { keyFile + ".previous" }

    /// Whether hosts should still trust it at `time`.
    package func isPublished(at time: Int64) -> Bool { time < publishedUntil }

    /// The SSH name of its key type.
    package var keyTypeName: String { Self.typeName(of: publicKeyBlob) }

    /// Its `TrustedUserCAKeys` line: `TYPE BASE64 COMMENT`.
    package func publicKeyLine(comment: String) -> String {
        Self.line(ofPublicKey: publicKeyBlob) + " " + comment
    }

    /// The file's content: `{"public_key": "TYPE BASE64", "rotated_at": N, "published_until": N}`.
    func encoded() -> [UInt8] {
        let document: JSONValue = .object([
            "public_key": .string(Self.line(ofPublicKey: publicKeyBlob)),
            "rotated_at": .integer(rotatedAt), "published_until": .integer(publishedUntil),
        ])
        return Array((document.serialized() + "\n").utf8)
    }

    /// Writes the file (0600, atomically).
    ///
    /// - Throws: `KeyAuthError` `.storageFailed` when it cannot be written.
    func write(to path: String) throws(KeyAuthError) {
        try SecureFile.write(encoded(), to: path)
    }

    /// The previous CA kept beside `keyFile`, or nil when there is none.
    ///
    /// - Throws: `KeyAuthError` naming the file: `.keyUnprotected` (a symlink, another user's
    ///   file, group or other permission bits), `.keyCorrupt` (not such a document, or a key of
    ///   another type).
    package static func load(besides keyFile: String) throws(KeyAuthError) -> SSHPreviousAuthority? {
        try readGuarded(path(besides: keyFile), as: "a previous SSH CA as ssh-ca rotate writes it", decode)
    }

    /// Reads a file kept beside the CA key file, guarded like it, and decodes it with `decode`;
    /// nil when the file is not there.
    ///
    /// - Throws: `KeyAuthError` naming the option and the file: the read's errors, and
    ///   `.keyCorrupt` "PATH is not `what`" when `decode` finds no such document.
    static func readGuarded<Value>(
        _ path: String, as what: String, _ decode: ([UInt8]) -> Value?
    ) throws(KeyAuthError) -> Value? {
        guard SecureFile.exists(path) else { return nil }
        let bytes: [UInt8]
        do {
            bytes = try SecureFile.readProtected(path)
        } catch {
            throw KeyAuthError(error.code, "--ssh-ca-key-file: \(error.message)", underlying: error.underlying)
        }
        guard let decoded = decode(bytes) else {
            throw KeyAuthError(.keyCorrupt, "--ssh-ca-key-file: \(path) is not \(what)")
        }
        return decoded
    }

    /// The document `encoded()` writes, checked: a public key of a CA type whose line names the
    /// type its blob starts with, and times in order.
    static func decode(_ bytes: [UInt8]) -> SSHPreviousAuthority? {
        guard let document = try? JSONValue(parsing: bytes),
            let line = document["public_key"]?.stringValue, let blob = publicKeyBlob(ofLine: line),
            let rotatedAt = document["rotated_at"]?.integerValue,
            let publishedUntil = document["published_until"]?.integerValue, rotatedAt <= publishedUntil
        else { return nil }
        return SSHPreviousAuthority(publicKeyBlob: blob, rotatedAt: rotatedAt, publishedUntil: publishedUntil)
    }

    /// The key of a `TYPE BASE64` line as these files write it, checked: a CA type whose name
    /// the blob starts with, and a key after it; nil otherwise.
    static func publicKeyBlob(ofLine line: String) -> [UInt8]? {
        let fields = line.split(separator: " ", omittingEmptySubsequences: false)
        guard fields.count == 2, keyTypeNames.contains(String(fields[0])),
            let blob = standardBase64Decoded(fields[1])
        else { return nil }
        var reader = SSHWireReader(blob)
        guard let name = reader.string(), String(decoding: name, as: UTF8.self) == fields[0],
            reader.string() != nil
        else { return nil }
        return blob
    }

    /// The `TYPE BASE64` line of `blob`, as these files keep a key.
    static func line(ofPublicKey blob: [UInt8]) -> String {
        "\(typeName(of: blob)) \(SSHText.base64(blob))"
    }

    /// The key type a public key blob starts with; empty for a blob without one.
    private static func typeName(of blob: [UInt8]) -> String {
        var reader = SSHWireReader(blob)
        return reader.string().map { String(decoding: $0, as: UTF8.self) } ?? ""
    }

    /// Padded standard base64 (what ``SSHText/base64(_:)`` writes) read through the strict
    /// base64url decoder: the two alphabet differences swapped and the padding checked.
    private static func standardBase64Decoded(_ text: Substring) -> [UInt8]? {
        guard text.utf8.count % 4 == 0 else { return nil }
        var body = Substring(text)
        var padding = 0
        while body.hasSuffix("="), padding < 2 {
            body.removeLast()
            padding += 1
        }
        guard !body.contains("-"), !body.contains("_"), !body.contains("=") else { return nil }
        return Base64URL.decode(String(body.map { $0 == "+" ? "-" : $0 == "/" ? "_" : $0 }))
    }
}
