import Foundation

/// Runs blocking work (a terminal read, a PAM transaction) on its own thread.
///
/// The cooperative thread pool has as many threads as cores; a `read(2)` that waits for a person
/// to type would starve every other task of one of them. A dedicated thread per prompt is cheap
/// next to the seconds a person takes to answer.
package enum BlockingThread {
    /// Runs `body` on a new thread and resumes with its result.
    package static func run<Value: Sendable>(
        _ body: @escaping @Sendable () -> Result<Value, KeyAuthError>
    ) async throws(KeyAuthError) -> Value {
        if Task.isCancelled {
            throw KeyAuthError(.cancelled, "The prompt was cancelled before it started.")
        }
        return try await BlockingWork.run(threadName: "keyauth-blocking") { () throws(KeyAuthError) in
            try body().get()
        }
    }

    /// Reads one answer from `reader` on a thread of its own.
    package static func read(_ reader: any SecretReader, prompt: String, echo: Bool = false) async throws(KeyAuthError)
        -> SecretBytes
    {
        try await run { Result { () throws(KeyAuthError) in try reader.readLine(prompt: prompt, echo: echo) } }
    }
}
