/// A configuration value (flag, environment variable or settings file line) that cannot be used.
///
/// The command prints the message and exits with ``status``: 64 (usage error) for the command
/// line and the environment, 78 (EX_CONFIG) for the settings file, whose messages name its path
/// and line.
package struct ServerConfigurationError: Error, Sendable, CustomStringConvertible, Equatable {
    /// What is wrong, naming the flag, variable, or file and line.
    package let message: String
    /// The exit status the command ends with.
    package let status: Int32

    /// Creates an error.
    package init(_ message: String, status: Int32 = ServerCommand.ExitStatus.usage) {
        self.message = message
        self.status = status
    }

    package var description: String { message }
}

extension ServerConfigurationError {
    /// An admin command's argument that names nothing stored (`no user named bob`): exit 1, the
    /// same for every command, while a malformed argument is a usage error (64).
    static func nothingMatched(_ message: String) -> ServerConfigurationError {
        ServerConfigurationError(message, status: ServerCommand.ExitStatus.failure)
    }
}
