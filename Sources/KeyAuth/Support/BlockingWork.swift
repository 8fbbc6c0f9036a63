import Foundation

/// Work that blocks a thread for long (key generation, TPM commands that derive RSA keys), run on
/// a plain thread so that it never holds one of the cooperative pool's few threads.
package enum BlockingWork {
    /// Runs `work` on a new thread and waits for it without blocking the caller's thread.
    /// - Parameter threadName: the thread's name in `ps -L`, `top -H` and a debugger's list.
    package static func run<Value: Sendable, Failure: Error>(
        threadName: String = "keyauth-work",
        _ work: @escaping @Sendable () throws(Failure) -> Value
    ) async throws(Failure) -> Value {
        let result: Result<Value, Failure> = await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                ThreadName.setCurrent(threadName)
                do throws(Failure) {
                    continuation.resume(returning: .success(try work()))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
        }
        return try result.get()
    }
}
