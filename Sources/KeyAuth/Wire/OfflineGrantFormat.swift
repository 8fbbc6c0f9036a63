/// The names an offline grant travels under (PROTOCOL.md section 7.2, "Offline grants"), shared
/// by the server that signs grants and `keyauth-pam-helper`, which stores and checks them.
package enum OfflineGrantFormat {
    /// The grant's header `typ`: neither `at+jwt` nor `JWT`, so that a grant is never taken for an
    /// access token or an ID token, and a token of those kinds never for a grant.
    package static let type = "keyauth-offline-grant+jwt"
    /// The token response member that carries a host login's grant.
    package static let responseMember = "offline_grant"
    /// The claim naming the host the grant is for.
    package static let hostClaim = "host"
    /// The claim naming the Linux user the grant is for.
    package static let linuxUserClaim = "linux_user"
    /// The algorithms a grant may be signed with: the server's token algorithms, never `none` nor
    /// HMAC (which are not ``JWSAlgorithm`` values at all).
    package static let algorithms: Set<JWSAlgorithm> = [.rs256, .es256, .edDSA]
}
