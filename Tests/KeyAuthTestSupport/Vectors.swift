import Foundation
import KeyAuth

/// The published test vectors in `Tests/Vectors/` (sources and licences in its README).
///
/// They are copies of files published by others, kept unmodified, so that a test agreeing with
/// them is an interoperability result rather than a self-check; a clone of the repository alone
/// has everything its tests read.
public enum Vectors {
    /// The vectors folder; `KEYAUTH_VECTORS` overrides it.
    public static var directory: URL {
        if let override = ProcessInfo.processInfo.environment["KEYAUTH_VECTORS"] {
            return URL(fileURLWithPath: override)
        }
        return packageRoot.appendingPathComponent("Tests/Vectors")
    }

    /// The package root, found from this file's path.
    public static var packageRoot: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
    }

    /// Parses a vectors file as JSON.
    package static func load(_ relativePath: String) throws -> JSONValue {
        let data = try Data(contentsOf: directory.appendingPathComponent(relativePath))
        return try JSONValue(parsing: [UInt8](data), maximumDepth: 64)
    }
}

/// Hex decoding for vector files; empty for text that is not hex.
public func hexBytes(_ hex: String) -> [UInt8] {
    Hex.decode(Array(hex.utf8)) ?? []
}

/// Hex encoding for messages.
public func hexString(_ bytes: [UInt8]) -> String {
    Hex.encode(bytes)
}
