import KeyAuth
import Synchronization

/// The random `jti` of every login's access token, cut from blocks the CSPRNG fills 4 KiB at a
/// time.
///
/// Asking OpenSSL's DRBG for 16 bytes per token costs a `getpid` system call (its check for a
/// fork) and a generation with its reseed bookkeeping: 0.65 µs here, on every login. A block
/// serves 256 tokens for about the price of one request.
///
/// An identifier is public from the moment its token is, and nothing uses these bytes as a
/// secret, so the rest of a block held in memory reveals nothing a token does not. A process
/// that forked without exec could hand the same block out twice; keyauth-server never forks,
/// and the type is the server's alone, not the library's.
final class TokenIdentifiers: Sendable {
    /// The one source every issuer in the process shares, so that no two hand out one block.
    static let shared = TokenIdentifiers()

    /// Bytes in one identifier: 128 bits, as `jti` had when each came from `RAND_bytes`.
    static let length = 16

    private struct Block {
        var bytes: [UInt8] = []
        var next = 0
    }

    private let blockLength: Int
    private let block = Mutex(Block())

    /// `blockLength` is for tests that cross a block's end; it is rounded up to whole identifiers.
    init(blockLength: Int = 4096) {
        self.blockLength = max(Self.length, blockLength / Self.length * Self.length)
    }

    /// The next identifier, never handed out before by this source.
    ///
    /// - Throws: `.cryptoFailed` when the random number generator fails; no identifier is then
    ///   made from anything else.
    func next() throws(KeyAuthError) -> [UInt8] {
        try block.withLock { (block: inout Block) throws(KeyAuthError) -> [UInt8] in
            if block.next + Self.length > block.bytes.count {
                block.bytes = try CryptoPrimitives.randomBytes(count: blockLength)
                block.next = 0
            }
            let start = block.next
            block.next += Self.length
            return Array(block.bytes[start..<start + Self.length])
        }
    }
}
