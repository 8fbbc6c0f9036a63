#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Line reading and writing on raw descriptors, shared by the readers above.
enum LineIO {
    /// The longest answer accepted, PAM's own limit (`PAM_MAX_RESP_SIZE`).
    static let maximumLength = 512

    /// An error carrying `errno` as it is now.
    static func error(_ code: KeyAuthError.Code, _ message: String) -> KeyAuthError {
        let number = errno
        let native = NativeError(library: "errno", code: Int(number), text: String(cString: strerror(number)))
        return KeyAuthError(code, message, underlying: native)
    }

    /// Reads one line byte by byte into a buffer that is wiped afterwards.
    ///
    /// A line ends at a newline or at end of input after at least one byte; a trailing carriage
    /// return is dropped, so that input from Windows editors works.
    static func readLine(
        from descriptor: Int32,
        maximumLength: Int = maximumLength
    ) -> Result<SecretBytes, KeyAuthError> {
        var buffer = [UInt8](repeating: 0, count: maximumLength + 1)
        defer { CryptoPrimitives.wipe(&buffer) }
        var length = 0
        var sawInput = false
        var overflowed = false
        while true {
            var byte: UInt8 = 0
            let count = read(descriptor, &byte, 1)
            if count < 0 {
                if errno == EINTR { continue }
                return .failure(error(.presenceUnavailable, "reading the answer failed"))
            }
            if count == 0 {
                guard sawInput else {
                    return .failure(KeyAuthError(.cancelled, "input ended before an answer was given"))
                }
                break
            }
            sawInput = true
            if byte == UInt8(ascii: "\n") { break }
            // A byte past the buffer is dropped, and the answer refused below: cut short, it would
            // be a different PIN from the one typed.
            guard length < maximumLength + 1 else {
                overflowed = true
                continue
            }
            buffer[length] = byte
            length += 1
            byte = 0
        }
        if length > 0, buffer[length - 1] == UInt8(ascii: "\r") {
            length -= 1
        }
        guard length <= maximumLength, !overflowed else {
            return .failure(
                KeyAuthError(.invalidArgument, "the answer is longer than \(maximumLength) bytes"))
        }
        return .success(SecretBytes(buffer[0..<length]))
    }
}
