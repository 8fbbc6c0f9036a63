import KeyAuth

/// What a registered client is: an application that signs its users in, or a Linux host whose
/// `pam_keyauth` asks a user to approve a login on their device (push login, docs/HOST-LOGIN.md).
package enum ClientKind: String, Sendable, Hashable, CaseIterable {
    case application
    case host
}

/// The rules that only host clients have: which users may log in to the host, and the audit
/// line of each push login.
///
/// A host's credentials live on the host (`/etc/keyauth/pam.conf`, root's), so whoever is root
/// there can ask any user for a push approval; the user list keeps a host that has no business
/// with a user from asking at all, before any device is bothered.
enum HostClients {
    /// Refuses `user` at `client` when the client is a host whose user list does not name them.
    ///
    /// - Throws: ``ServiceError`` `.accessDenied` saying which user and host, so that the host's
    ///   journal tells the administrator why.
    static func checkAllowed(_ user: String, at client: ClientRecord) throws(ServiceError) {
        guard client.kind == .host, !client.allowedUsers.isEmpty, !client.allowedUsers.contains(user) else { return }
        throw ServiceError(.accessDenied, "user \(user) may not log in to host \(client.name)")
    }

    /// Refuses `user` at the host client `id` that a host login's statement names: an unknown
    /// client, or one that is no host, is refused too (the host believes it is one).
    ///
    /// - Throws: ``ServiceError`` `.accessDenied`; ``StorageError``.
    static func checkAllowed(_ user: String, atClientID id: String, in storage: any ServerStorage) throws {
        guard let client = try storage.client(id: id), client.kind == .host else {
            throw ServiceError(.accessDenied, "the host is not a host client of this server")
        }
        try checkAllowed(user, at: client)
    }

    /// The audit trail's record of a push login collected by a host: the approving device as the
    /// actor, the host as the subject (nothing for an application's sign-in, which
    /// `approve-sign-in` already records).
    static func loginEvent(
        of request: SignInRequestRecord, by deviceKID: String, client: ClientRecord, at time: Int64
    ) -> AuditEvent? {
        guard client.kind == .host else { return nil }
        return AuditEvent(
            time: time, action: .hostLogin, actor: AuditActor.device(kid: deviceKID).description, user: request.user,
            subject: client.name, detail: "push, host client \(client.id)")
    }

    /// Checks the user list given to `clients add --allow-user`.
    ///
    /// - Throws: ``ServerConfigurationError`` for a list on an application, or a name no user
    ///   can have.
    static func checkAllowedUsers(_ users: [String], kind: ClientKind) throws(ServerConfigurationError) {
        guard !users.isEmpty else { return }
        guard kind == .host else { throw ServerConfigurationError("--allow-user is only for --kind host") }
        for user in users where !InputRules.isValidUser(user) {
            throw ServerConfigurationError("--allow-user \(user): not a valid user name")
        }
    }
}
