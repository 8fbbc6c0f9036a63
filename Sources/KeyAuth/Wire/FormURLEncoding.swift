#if canImport(Glibc)
    import Glibc
#endif

/// `application/x-www-form-urlencoded`, the token endpoint's body format and the device list's
/// query: encoded by the client, decoded by the server, with one set of rules.
package enum FormURLEncoding {
    /// Why a form body cannot be read; the message names the problem, never a value.
    package struct DecodingError: Error, Sendable, Equatable {
        /// What is wrong, for the client.
        package let message: String
    }

    /// Percent-encodes `text`: the unreserved characters and `:` stay as they are (PROTOCOL.md
    /// writes the grant type that way), everything else becomes `%XX` with upper-case digits.
    package static func encode(_ text: String) -> String {
        var output = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                UInt8(ascii: "~"), UInt8(ascii: ":"):
                output.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                output += "%" + Hex.encode([byte], uppercase: true)
            }
        }
        return output
    }

    /// `name=value` pairs joined with `&`, each part encoded, in the order given.
    package static func encode(_ pairs: KeyValuePairs<String, String>) -> String {
        pairs.map { encode($0.key) + "=" + encode($0.value) }.joined(separator: "&")
    }

    /// The name-value pairs of `body`.
    ///
    /// - Throws: ``DecodingError`` for bad percent-encoding, invalid UTF-8 or a repeated
    ///   parameter (RFC 6749 section 3.2: parameters must not be included more than once).
    package static func decode(_ body: [UInt8]) throws(DecodingError) -> [String: String] {
        let (values, repeated) = try decodeNotingRepeats(body)
        if let name = repeated.min() { throw DecodingError(message: repeatedParameterMessage(name)) }
        return values
    }

    /// The first value of each name in `body`, and the names that came more than once: for a
    /// server that answers a repeated parameter in its own way (the authorization endpoint sends
    /// some errors back to the client). RFC 6749 section 3.1 forbids repeating a parameter, so a
    /// caller refuses the request when `repeated` is not empty and never reads such a value.
    ///
    /// - Throws: ``DecodingError`` for bad percent-encoding or invalid UTF-8.
    package static func decodeNotingRepeats(_ body: [UInt8]) throws(DecodingError) -> (
        values: [String: String], repeated: Set<String>
    ) {
        var values = [String: String](minimumCapacity: 4)
        var repeated: Set<String> = []
        let outcome = body.withUnsafeBufferPointer { body -> DecodingError? in
            // Pair by pair, found with memchr: the assertion a login sends is most of the body,
            // and plain.
            var pairStart = 0
            while pairStart < body.count {
                let pairEnd = firstIndex(of: UInt8(ascii: "&"), in: body, from: pairStart, to: body.count)
                let equals = firstIndex(of: UInt8(ascii: "="), in: body, from: pairStart, to: pairEnd)
                let isPlain = !containsEscape(body, from: pairStart, to: pairEnd)
                if pairEnd > pairStart {
                    let valueStart = equals == pairEnd ? pairEnd : equals + 1
                    let name: String
                    let value: String
                    do throws(DecodingError) {
                        name = try decodeComponent(UnsafeBufferPointer(rebasing: body[pairStart..<equals]), isPlain)
                        value = try decodeComponent(UnsafeBufferPointer(rebasing: body[valueStart..<pairEnd]), isPlain)
                    } catch {
                        return error
                    }
                    if values[name] == nil { values[name] = value } else { repeated.insert(name) }
                }
                pairStart = pairEnd + 1
            }
            return nil
        }
        if let outcome { throw outcome }
        return (values, repeated)
    }

    /// Whether `buffer[start..<end]` holds a `%` or a `+`: the only bytes that make a component's
    /// text differ from its bytes.
    private static func containsEscape(_ buffer: UnsafeBufferPointer<UInt8>, from start: Int, to end: Int) -> Bool {
        firstIndex(of: UInt8(ascii: "%"), in: buffer, from: start, to: end) != end
            || firstIndex(of: UInt8(ascii: "+"), in: buffer, from: start, to: end) != end
    }

    /// The index of the first `byte` in `buffer[start..<end]`, or `end`.
    private static func firstIndex(of byte: UInt8, in buffer: UnsafeBufferPointer<UInt8>, from start: Int, to end: Int)
        -> Int
    {
        guard start < end, let base = buffer.baseAddress, let found = memchr(base + start, Int32(byte), end - start)
        else { return end }
        return UnsafeRawPointer(found) - UnsafeRawPointer(base)
    }

    /// What a server says about a repeated parameter: its name when that is short and plain (a
    /// client chose it, and an OAuth `error_description` allows no quote or backslash), else
    /// only that one is repeated.
    package static func repeatedParameterMessage(_ name: String) -> String {
        let isPlain =
            !name.isEmpty && name.utf8.count <= 32
            && name.utf8.allSatisfy { byte in
                (0x41...0x5a).contains(byte) || (0x61...0x7a).contains(byte) || (0x30...0x39).contains(byte)
                    || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".")
            }
        return isPlain ? "the parameter \(name) is repeated" : "a parameter is repeated"
    }

    /// One percent-encoded component (`+` as a space), as forms and HTTP Basic credentials
    /// (RFC 6749 section 2.3.1) encode a name or a value.
    package static func decodeComponent(_ bytes: ArraySlice<UInt8>) throws(DecodingError) -> String {
        let outcome = bytes.withUnsafeBufferPointer { bytes -> Result<String, DecodingError> in
            let isPlain = !bytes.contains { $0 == UInt8(ascii: "%") || $0 == UInt8(ascii: "+") }
            return Result { () throws(DecodingError) in try decodeComponent(bytes, isPlain) }
        }
        return try outcome.get()
    }

    /// `bytes` decoded; `isPlain` says the caller saw no `%` and no `+` in them, so that most
    /// values (an assertion, a code) are only validated, where they lie.
    private static func decodeComponent(_ bytes: UnsafeBufferPointer<UInt8>, _ isPlain: Bool) throws(DecodingError)
        -> String
    {
        // A zero byte: no parameter holds one, PostgreSQL cannot store one, and C code reading
        // the value would stop at it, so the value would mean two things.
        if isPlain {
            if let base = bytes.baseAddress, memchr(base, 0, bytes.count) != nil { throw nulRefusal }
            guard let text = UTF8Text.string(validating: bytes) else {
                throw DecodingError(message: "the form body is not UTF-8")
            }
            return text
        }
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "+") {
                output.append(UInt8(ascii: " "))
            } else if byte == UInt8(ascii: "%") {
                guard index + 2 < bytes.count, let high = Hex.value(ofDigit: bytes[index + 1]),
                    let low = Hex.value(ofDigit: bytes[index + 2])
                else { throw DecodingError(message: "the form body has bad percent-encoding") }
                output.append(high << 4 | low)
                index += 2
            } else {
                output.append(byte)
            }
            index += 1
        }
        guard !output.contains(0) else { throw nulRefusal }
        guard let text = UTF8Text.string(validating: output[...]) else {
            throw DecodingError(message: "the form body is not UTF-8")
        }
        return text
    }

    private static let nulRefusal = DecodingError(message: "the form body holds a NUL character (%00)")
}
