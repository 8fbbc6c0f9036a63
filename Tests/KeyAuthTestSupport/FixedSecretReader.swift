import Foundation
import KeyAuth

/// Answers prompts from a fixed queue, for tests and for apps that already hold the answer.
///
/// It records every prompt and message, so that a test can check what a person would have been
/// asked and that a locked-out check asked nothing.
public final class FixedSecretReader: SecretReader, @unchecked Sendable {
    /// One prompt as the reader received it.
    public struct Request: Sendable, Equatable {
        /// The prompt text.
        public let prompt: String
        /// Whether the answer would have been shown while typed.
        public let echo: Bool

        /// A prompt as a test expects it.
        public init(prompt: String, echo: Bool) {
            self.prompt = prompt
            self.echo = echo
        }
    }

    private let lock = NSLock()
    private var answers: [SecretBytes]
    private var recordedRequests: [Request] = []
    private var recordedMessages: [String] = []

    /// Answers each prompt with the next of `answers`; prompts after the last one are cancelled.
    public init(answers: [SecretBytes]) {
        self.answers = answers
    }

    /// Answers with the UTF-8 bytes of each string; the strings themselves are not wiped, so use
    /// this only for test data.
    public convenience init(answers: [String]) {
        self.init(answers: answers.map { SecretBytes(utf8: $0) })
    }

    /// The prompts received so far, in order.
    public var requests: [Request] {
        lock.withLock { recordedRequests }
    }

    /// The messages shown so far, in order.
    public var messages: [String] {
        lock.withLock { recordedMessages }
    }

    /// Returns the next answer.
    ///
    /// - Throws: ``KeyAuthError/Code-swift.struct/cancelled`` when no answer is left, as a person
    ///   closing the prompt would.
    public func readLine(prompt: String, echo: Bool) throws(KeyAuthError) -> SecretBytes {
        let answer: SecretBytes? = lock.withLock {
            recordedRequests.append(Request(prompt: prompt, echo: echo))
            return answers.isEmpty ? nil : answers.removeFirst()
        }
        guard let answer else {
            throw KeyAuthError(.cancelled, "No answer is left for the prompt.")
        }
        return answer
    }

    /// Records the message.
    public func display(_ message: String, isError: Bool) {
        lock.withLock { recordedMessages.append(message) }
    }
}
