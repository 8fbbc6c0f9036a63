/// The syntax of user names, key ids and sign-in request ids (PROTOCOL.md sections 1 and 4),
/// checked the same way by the client before it generates anything and by the server on every
/// request. Device names, binding messages and client names follow ``NameRule``.
package enum InputRules {
    /// 1 to 64 characters of `[A-Za-z0-9._@-]`, the first a letter or a digit.
    ///
    /// A user name goes into logs, URLs, PAM and tokens' `sub`, and relying parties use it as a
    /// file or directory name or pass it to commands: these characters need no quoting in any of
    /// them, a name cannot be `.` or `..`, and it cannot be taken for a command-line option.
    package static func isValidUser(_ user: String) -> Bool {
        let bytes = Array(user.utf8)
        guard (1...64).contains(bytes.count), let first = bytes.first, isLetterOrDigit(first) else { return false }
        return bytes.allSatisfy { byte in
            isLetterOrDigit(byte) || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "@")
                || byte == UInt8(ascii: "-")
        }
    }

    private static func isLetterOrDigit(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            true
        default:
            false
        }
    }

    /// What the user rule says, for error messages.
    package static let userRule = "1 to 64 characters of A-Z a-z 0-9 . _ @ -, starting with a letter or digit"

    /// Whether `text` is non-empty printable ASCII, without spaces (0x21 to 0x7E): what a token
    /// or a URL the client stores, prints and sends on may hold. A control character there would
    /// reach the user's terminal, a line break a request's header.
    package static func isPrintableASCIIWord(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.allSatisfy { (0x21...0x7E).contains($0) }
    }

    /// A key fingerprint: 43 characters of canonical base64url that decode to the 32 bytes of a
    /// SHA-256 thumbprint (RFC 7638). A kid goes into URL paths, so nothing else is accepted.
    package static func isValidKeyID(_ keyID: String) -> Bool {
        keyID.utf8.count == 43 && Base64URL.decode(keyID)?.count == 32
    }

    /// A sign-in request id: 43 characters of canonical base64url (256 random bits), as the
    /// server makes them. It goes into URL paths, so nothing else is accepted.
    package static func isValidSignInRequestID(_ id: String) -> Bool {
        isValidKeyID(id)
    }

    /// Whether `name` follows ``NameRule/deviceName``, in whatever normalization form it comes.
    /// Where the name is kept, use ``NameRule/normalize(_:)``, which returns the form to keep.
    package static func isValidDeviceName(_ name: String) -> Bool {
        NameRule.deviceName.accepts(name)
    }

    /// Answers that refuse a sign-in at `keyauth approve`, compared trimmed and in lower case. A
    /// device checks them before anything typed is taken for a code, and the server refuses a
    /// binding message that reads as one of them, so no answer that means "no" can ever approve.
    package static let refusingAnswers: Set<String> = [
        "deny", "no", "n", "cancel", "reject", "refuse", "abort", "quit", "q", "skip",
    ]

    /// Answers a person types at a prompt out of habit to say "yes". The server refuses a
    /// binding message that reads as one of them: the code must be something the person reads
    /// where they sign in, or typing it proves nothing about which request they meant.
    package static let assentingAnswers: Set<String> = [
        "yes", "y", "ok", "okay", "approve", "allow", "accept", "confirm", "sure", "continue",
    ]

    /// The longest binding message, in characters (the issue's limit; CIBA leaves it open).
    package static let maximumBindingMessageLength = NameRule.bindingMessage.maximumCharacters

    /// Whether `message` follows ``NameRule/bindingMessage``: the device name's rule with half
    /// its lengths, so that both screens show the same text and nothing else.
    package static func isValidBindingMessage(_ message: String) -> Bool {
        NameRule.bindingMessage.accepts(message)
    }
}
