internal import CKeyAuthOpenSSL

/// Secret bytes (a PIN, an unencrypted private key) in memory that is zeroed when released.
///
/// Swift arrays and strings can be copied behind our back and are never wiped; a PIN kept in a
/// `SecretBytes` lives in one allocation that `deinit` overwrites with `OPENSSL_cleanse`.
public final class SecretBytes: @unchecked Sendable {
    private let storage: UnsafeMutableRawBufferPointer

    /// Copies `bytes` into zeroed-on-release memory. The caller should wipe its own copy.
    public init<Bytes: Collection>(_ bytes: Bytes) where Bytes.Element == UInt8 {
        storage = UnsafeMutableRawBufferPointer.allocate(byteCount: max(bytes.count, 1), alignment: 1)
        storage.initializeMemory(as: UInt8.self, repeating: 0)
        _ = UnsafeMutableRawBufferPointer(rebasing: storage[0..<bytes.count]).initializeMemory(
            as: UInt8.self, from: bytes)
        count = bytes.count
    }

    /// Takes the UTF-8 bytes of `text`. Prefer the byte initializer where the input is bytes.
    public convenience init(utf8 text: String) {
        self.init(Array(text.utf8))
    }

    /// The number of secret bytes.
    public let count: Int

    /// Lends the bytes to `body`; the pointer must not escape.
    public func withUnsafeBytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        try body(UnsafeRawBufferPointer(rebasing: storage[0..<count]))
    }

    /// Compares in constant time.
    public func constantTimeEquals(_ other: SecretBytes) -> Bool {
        guard count == other.count else { return false }
        return withUnsafeBytes { left in
            other.withUnsafeBytes { right in
                count == 0 || CRYPTO_memcmp(left.baseAddress, right.baseAddress, count) == 0
            }
        }
    }

    deinit {
        OpenSSL.cleanse(storage)
        storage.deallocate()
    }
}
