import Foundation

/// Work that blocks a thread for long (key generation, TPM commands that derive RSA keys), run on
/// a plain thread so that it never holds one of the cooperative pool's few threads.
package enum BlockingWork {
    /// Runs `work` on a new thread and waits for it without blocking the caller's thread.
    package static func run<Value: Sendable>(
        _ work: @escaping @Sendable () throws(KeyAuthError) -> Value
    ) async throws(KeyAuthError) -> Value {
        let result: Result<Value, KeyAuthError> = await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                ThreadName.setCurrent("keyauth-work")
                do throws(KeyAuthError) {
                    continuation.resume(returning: .success(try work()))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
        }
        return try result.get()
    }
}
