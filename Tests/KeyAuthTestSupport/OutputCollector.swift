import Foundation

/// Collects text written from several threads: what a command writes to one stream, or what a
/// scripted server saw.
public final class OutputCollector: @unchecked Sendable {
    private let lock = NSLock()
    private var buffer = ""

    public init() {}

    /// Appends `text`.
    public func append(_ text: String) { lock.withLock { buffer += text } }

    /// Everything appended so far.
    public var text: String { lock.withLock { buffer } }
}
