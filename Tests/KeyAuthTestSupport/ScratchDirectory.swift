import Foundation

/// A ``TemporaryDirectory`` owned by a test value: removed when the value goes, for suites that
/// keep one as a property.
public final class ScratchDirectory: Sendable {
    private let directory: TemporaryDirectory

    /// The directory's path.
    public var path: String { directory.path }

    public init(_ label: String = "keyauth") {
        directory = TemporaryDirectory(label)
    }

    /// Writes `contents` to the file `name` in the directory.
    public func write(_ name: String, _ contents: String) throws {
        try contents.write(toFile: "\(path)/\(name)", atomically: true, encoding: .utf8)
    }

    /// The names in the directory, sorted.
    public func entries() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: path).sorted()
    }

    deinit {
        directory.remove()
    }
}
