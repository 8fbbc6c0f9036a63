/// How a device key was protected when it was made, as its registration states it
/// (`key_protection`, PROTOCOL.md section 4).
///
/// The server cannot see a key's protection, and anything running as the user can later put a
/// PIN of its own on a key made without one; what a client said when it made the key is the only
/// statement that predates such a change. Host logins, which stand in for a password, need it:
/// keyauth-server lets only a device registered with ``pin`` log in to a host (PAM, `sudo`), so
/// an application whose key has a PIN states it in ``DeviceEnrollment/keyProtection``.
public enum KeyProtection: String, Sendable, Hashable {
    /// The key cannot sign without the user's PIN: a key file encrypted with it, or a TPM key
    /// with it as its authorization value.
    case pin
    /// The key signs without a PIN (presence `none` or `pam`): `"none"` on the wire. Not named
    /// `none`, which Swift would read as `Optional.none` wherever a `KeyProtection?` is expected.
    case withoutPIN = "none"

    /// The lesser of two statements, `none` below unknown (nil) below `pin`: what a device keeps
    /// when another device's key vouched for it (an approval, recovery codes it made).
    package static func lesser(_ first: KeyProtection?, _ second: KeyProtection?) -> KeyProtection? {
        if first == KeyProtection.withoutPIN || second == KeyProtection.withoutPIN { return KeyProtection.withoutPIN }
        return first == .pin && second == .pin ? .pin : nil
    }
}
