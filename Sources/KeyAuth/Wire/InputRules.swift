/// The syntax of user names, device names and key ids (PROTOCOL.md sections 1 and 4), checked
/// the same way by the client before it generates anything and by the server on every request.
package enum InputRules {
    /// 1 to 64 characters of `[A-Za-z0-9._@-]`: safe in logs, URLs and PAM user names.
    package static func isValidUser(_ user: String) -> Bool {
        let bytes = Array(user.utf8)
        guard (1...64).contains(bytes.count) else { return false }
        return bytes.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "@"),
                UInt8(ascii: "-"):
                return true
            default:
                return false
            }
        }
    }

    /// What the user rule says, for error messages.
    package static let userRule = "1 to 64 characters of A-Z a-z 0-9 . _ @ -"

    /// 1 to 64 printable characters: any letters, including non-ASCII, but no control or
    /// format characters, line separators or surrounding whitespace that would confuse a listing.
    package static func isValidDeviceName(_ name: String) -> Bool {
        guard (1...64).contains(name.count), name.first?.isWhitespace == false, name.last?.isWhitespace == false
        else { return false }
        return name.unicodeScalars.allSatisfy { scalar in
            switch scalar.properties.generalCategory {
            case .control, .format, .lineSeparator, .paragraphSeparator, .surrogate, .privateUse, .unassigned:
                return false
            default:
                return true
            }
        }
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

    /// The longest binding message, in characters (the issue's limit; CIBA leaves it open).
    package static let maximumBindingMessageLength = 32

    /// A binding message: 1 to 32 printable characters, with the device name's rule for what
    /// printable means, so that both screens show the same text and nothing else.
    package static func isValidBindingMessage(_ message: String) -> Bool {
        message.count <= maximumBindingMessageLength && isValidDeviceName(message)
    }
}
