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
    public static func load(_ relativePath: String) throws -> JSONValue {
        let data = try Data(contentsOf: directory.appendingPathComponent(relativePath))
        return try JSONValue(parsing: [UInt8](data), maximumDepth: 64)
    }
}

/// Hex decoding for vector files.
public func hexBytes(_ hex: String) -> [UInt8] {
    var bytes: [UInt8] = []
    var iterator = hex.utf8.makeIterator()
    while let high = iterator.next(), let low = iterator.next() {
        guard let value = UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16) else { return [] }
        bytes.append(value)
    }
    return bytes
}

/// Hex encoding for messages.
public func hexString(_ bytes: [UInt8]) -> String {
    bytes.map { String(format: "%02x", $0) }.joined()
}
