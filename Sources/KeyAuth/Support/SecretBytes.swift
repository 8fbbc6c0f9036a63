internal import CKeyAuthOpenSSL
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Secret bytes (a PIN, an unencrypted private key) in memory that is zeroed when released.
///
/// Swift arrays and strings can be copied behind our back and are never wiped; a PIN kept in a
/// `SecretBytes` lives in one allocation that `deinit` overwrites with `OPENSSL_cleanse`.
public final class SecretBytes: @unchecked Sendable {
    private let storage: UnsafeMutableRawBufferPointer
    /// Whether `storage` is `mlock`ed (and is whole pages, so that unlocking it unlocks nothing
    /// another allocation shares).
    private let isLockedInMemory: Bool

    /// Copies `bytes` into zeroed-on-release memory. The caller should wipe its own copy.
    public init<Bytes: Collection>(_ bytes: Bytes) where Bytes.Element == UInt8 {
        storage = UnsafeMutableRawBufferPointer.allocate(byteCount: max(bytes.count, 1), alignment: 1)
        storage.initializeMemory(as: UInt8.self, repeating: 0)
        _ = UnsafeMutableRawBufferPointer(rebasing: storage[0..<bytes.count]).initializeMemory(
            as: UInt8.self, from: bytes)
        count = bytes.count
        isLockedInMemory = false
    }

    /// Copies `bytes` into memory that is `mlock`ed (never written to swap) as well as zeroed on
    /// release: for a secret a process holds for hours, as `keyauth agent` does.
    ///
    /// - Throws: `.storageFailed` when the memory cannot be locked (`RLIMIT_MEMLOCK`); the
    ///   caller should refuse to hold the secret rather than hold it swappable.
    public init<Bytes: Collection>(lockedCopyOf bytes: Bytes) throws(KeyAuthError) where Bytes.Element == UInt8 {
        let page = max(Int(sysconf(Int32(_SC_PAGESIZE))), 4096)
        let size = (max(bytes.count, 1) + page - 1) / page * page
        storage = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: page)
        storage.initializeMemory(as: UInt8.self, repeating: 0)
        guard mlock(storage.baseAddress, size) == 0 else {
            let reason = String(cString: strerror(errno))
            storage.deallocate()
            throw KeyAuthError(.storageFailed, "cannot lock \(size) bytes in memory for a secret: \(reason)")
        }
        _ = UnsafeMutableRawBufferPointer(rebasing: storage[0..<bytes.count]).initializeMemory(
            as: UInt8.self, from: bytes)
        count = bytes.count
        isLockedInMemory = true
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
        if isLockedInMemory { munlock(storage.baseAddress, storage.count) }
        storage.deallocate()
    }
}
