/// Decodes `application/x-www-form-urlencoded` bodies (the token endpoint's format).
enum FormURLEncoded {
    /// The name-value pairs of `body`.
    ///
    /// - Throws: ``ServiceError`` `.invalidRequest` for bad percent-encoding, invalid UTF-8 or a
    ///   repeated parameter (RFC 6749 section 3.2: parameters must not be included more than once).
    static func parse(_ body: [UInt8]) throws(ServiceError) -> [String: String] {
        var result: [String: String] = [:]
        for pair in body.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let parts = pair.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
            let name = try decode(parts[0])
            let value = parts.count > 1 ? try decode(parts[1]) : ""
            guard result[name] == nil else {
                throw ServiceError(.invalidRequest, "the parameter \"\(name.prefix(32))\" is repeated")
            }
            result[name] = value
        }
        return result
    }

    private static func decode(_ bytes: ArraySlice<UInt8>) throws(ServiceError) -> String {
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count)
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let byte = bytes[index]
            if byte == UInt8(ascii: "+") {
                output.append(UInt8(ascii: " "))
            } else if byte == UInt8(ascii: "%") {
                guard index + 2 < bytes.endIndex, let high = hexValue(bytes[index + 1]),
                    let low = hexValue(bytes[index + 2])
                else { throw ServiceError(.invalidRequest, "the form body has bad percent-encoding") }
                output.append(high << 4 | low)
                index += 2
            } else {
                output.append(byte)
            }
            index += 1
        }
        guard let text = String(validating: output, as: UTF8.self) else {
            throw ServiceError(.invalidRequest, "the form body is not UTF-8")
        }
        return text
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
