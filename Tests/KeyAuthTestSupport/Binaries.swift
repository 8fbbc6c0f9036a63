import Foundation

/// The built `keyauth`, `keyauth-server` and example executables, found beside the test bundle.
///
/// A test that needs one and does not find it fails, saying so; it is never skipped, so that a
/// build that lost a binary cannot pass its tests.
public enum Binaries {
    /// The build products directory: `KEYAUTH_BIN_DIR`, else the directory of the running test
    /// bundle (SwiftPM puts executables beside it).
    public static let directory: String = {
        if let override = ProcessInfo.processInfo.environment["KEYAUTH_BIN_DIR"] { return override }
        let executable =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
            ?? CommandLine.arguments.first ?? ""
        var url = URL(fileURLWithPath: executable).deletingLastPathComponent()
        // The test binary may sit inside a bundle directory (`*.xctest/...`).
        while url.path != "/" {
            if FileManager.default.isExecutableFile(atPath: url.appendingPathComponent("keyauth-server").path) {
                return url.path
            }
            url.deleteLastPathComponent()
        }
        return Vectors.packageRoot.path + "/.build/debug"
    }()

    /// The `keyauth` command.
    public static var keyauth: String { directory + "/keyauth" }
    /// The `keyauth-server` command.
    public static var server: String { directory + "/keyauth-server" }
    /// The example service of `Examples/ServiceVerifier`.
    public static var exampleService: String { directory + "/keyauth-example-service" }

    /// `path` when it is an executable file.
    ///
    /// - Throws: ``TestFailure`` naming the missing binary.
    @discardableResult
    public static func require(_ path: String) throws -> String {
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw TestFailure("\(path) is not built: build the package (swift build) before its tests")
        }
        return path
    }
}

/// A failure in a test's setup, with a message.
public struct TestFailure: Error, CustomStringConvertible {
    public let description: String

    public init(_ description: String) {
        self.description = description
    }
}
