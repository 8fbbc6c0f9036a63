/// A configuration value (flag or environment variable) that cannot be used.
///
/// The command prints the message and exits with status 64 (usage error).
public struct ServerConfigurationError: Error, Sendable, CustomStringConvertible, Equatable {
    /// What is wrong, naming the flag.
    public let message: String

    /// Creates an error.
    public init(_ message: String) {
        self.message = message
    }

    public var description: String { message }
}
