#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Writing to raw file descriptors, for the prompts, the command's output and the server's log.
package enum DescriptorIO {
    /// Writes all of `text`, retrying after signals and short writes.
    ///
    /// - Returns: false when a write fails for another reason (the descriptor is closed, the
    ///   reader went away); what was written stays written.
    @discardableResult
    package static func writeAll(_ descriptor: Int32, _ text: String) -> Bool {
        writeAll(descriptor, bytes: Array(text.utf8))
    }

    /// Writes all of `bytes` in as few `write(2)` calls as the kernel allows.
    @discardableResult
    package static func writeAll(_ descriptor: Int32, bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                guard let base = buffer.baseAddress else { return false }
                let written = write(descriptor, base + offset, buffer.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    return false
                }
                offset += written
            }
            return true
        }
    }
}
