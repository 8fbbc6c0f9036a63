import KeyAuth

/// HMAC-SHA256 (RFC 2104), only for forging "HS256 signed with the public key as secret" tokens
/// in tests; the library itself never computes an HMAC.
public func hmacSHA256(key: [UInt8], message: [UInt8]) throws -> [UInt8] {
    var block = key.count > 64 ? try CryptoPrimitives.sha256(key) : key
    block += [UInt8](repeating: 0, count: 64 - block.count)
    let inner = try CryptoPrimitives.sha256(block.map { $0 ^ 0x36 } + message)
    return try CryptoPrimitives.sha256(block.map { $0 ^ 0x5C } + inner)
}
