/// A document that does not have the shape the protocol gives it (PROTOCOL.md section 4).
///
/// ``problem`` completes a sentence about the document ("has no kid or status"), so that the
/// server can answer `invalid_request` with it and the client can name the server and the
/// answer it read; it never holds a value from the document.
package struct WireFormatError: Error, Sendable, Equatable {
    /// What is wrong with the document.
    package let problem: String
    /// Whether the problem is in one entry of a list rather than in the document itself.
    package let isInEntry: Bool

    package init(_ problem: String, isInEntry: Bool = false) {
        self.problem = problem
        self.isInEntry = isInEntry
    }
}
