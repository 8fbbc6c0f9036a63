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
        bytes.withUnsafeBytes { writeAll(descriptor, buffer: $0) }
    }

    /// Writes all of `buffer`, retrying after signals and short writes, without copying it.
    @discardableResult
    package static func writeAll(_ descriptor: Int32, buffer: UnsafeRawBufferPointer) -> Bool {
        writeAll(buffer) { write(descriptor, $0, $1) }
    }

    /// Sends all of `bytes` on a connected socket. A peer that has gone away makes it return
    /// false: `MSG_NOSIGNAL` keeps the kernel from raising SIGPIPE, whose default action would
    /// end the process (an agent that any client could stop by closing before the answer).
    @discardableResult
    package static func sendAll(_ socket: Int32, bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { sendAll(socket, buffer: $0) }
    }

    /// ``sendAll(_:bytes:)`` from memory the caller owns, without copying it.
    @discardableResult
    package static func sendAll(_ socket: Int32, buffer: UnsafeRawBufferPointer) -> Bool {
        writeAll(buffer) { send(socket, $0, $1, Int32(MSG_NOSIGNAL)) }
    }

    private static func writeAll(
        _ buffer: UnsafeRawBufferPointer, _ writeSome: (UnsafeRawPointer, Int) -> Int
    ) -> Bool {
        var offset = 0
        while offset < buffer.count {
            guard let base = buffer.baseAddress else { return false }
            let written = writeSome(base + offset, buffer.count - offset)
            if written < 0 {
                if errno == EINTR { continue }
                return false
            }
            offset += written
        }
        return true
    }
}
