@testable import KeyAuthServer

/// The configuration `keyauth-server serve` builds from `arguments` and `environment`.
///
/// - Throws: ``ServerConfigurationError`` as the command would, or ``TestFailure`` when the
///   arguments name another verb.
func serveConfiguration(_ arguments: [String], _ environment: [String: String] = [:]) throws -> ServerConfiguration {
    guard case .serve(let configuration) = try ServerCommand.parse(arguments: arguments, environment: environment)
    else {
        throw TestFailure("\(arguments) is not serve")
    }
    return configuration
}
