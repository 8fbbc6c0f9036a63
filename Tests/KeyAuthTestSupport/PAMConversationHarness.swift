import KeyAuth

/// Runs the library's PAM conversation function on fabricated messages, through its C pointer
/// as libpam calls it, and frees the replies as libpam would: tests see exactly what a PAM
/// module would receive, without a PAM stack.
///
/// - Returns: The conversation's PAM status and, when it succeeded, one reply per message (nil
///   where the message needs none), and the prompter's own error when it could not answer.
package func runPAMConversation(
    _ messages: [(style: PAMMessageStyle, text: String)], prompter: any SecretReader
) -> (status: Int32, replies: [String?], failure: KeyAuthError?) {
    conversePAM(messages, prompter: prompter)
}
