extension KeyAuthError.Code {
    /// The socket of `keyauth agent` is not provably the user's own: its directory or the socket
    /// file is a symbolic link, belongs to another user or is open to others, or the process
    /// listening runs as another user. Nothing was sent to it; the message says which.
    public static let agentUntrusted = KeyAuthError.Code(rawValue: "agent_untrusted")
}
