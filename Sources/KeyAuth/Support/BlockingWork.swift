import Foundation

/// Work that blocks a thread for long (key generation, TPM commands that derive RSA keys), run on
/// a plain thread so that it never holds one of the cooperative pool's few threads.
package enum BlockingWork {
    /// Runs `work` on a new thread and waits for it without blocking the caller's thread; only
    /// when no thread can be made (the process at its thread limit) does `work` run on the
    /// caller's thread instead, holding it until `work` returns.
    /// - Parameters:
    ///   - threadName: the thread's name in `ps -L`, `top -H` and a debugger's list.
    ///   - stackBytes: the thread's stack size, nil for the default; tests pass one too large to
    ///     have, to reach the path without a thread.
    package static func run<Value: Sendable, Failure: Error>(
        threadName: String = "keyauth-work", stackBytes: Int? = nil,
        _ work: @escaping @Sendable () throws(Failure) -> Value
    ) async throws(Failure) -> Value {
        let result: Result<Value, Failure> = await withCheckedContinuation { continuation in
            // Without a thread of its own the work holds one of the pool's threads for as long as
            // it takes (a prompt, the agent's whole life).
            DetachedThread.startOrRunHere(name: threadName, stackBytes: stackBytes) {
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
