internal import CKeyAuthPAM
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The context of the conversation function: who answers, and why they could not.
final class PAMConversation {
    let prompter: any SecretReader
    /// The prompter's error, kept because PAM reduces it to `PAM_CONV_ERR`.
    var failure: KeyAuthError?

    init(prompter: any SecretReader) {
        self.prompter = prompter
    }

    /// Asks the prompter on this thread, the PAM thread (never one of the cooperative pool),
    /// which waits for the person as PAM expects.
    func ask(_ prompt: String, echo: Bool) -> SecretBytes? {
        do {
            return try prompter.readLine(prompt: prompt, echo: echo)
        } catch {
            failure = error
            return nil
        }
    }
}

@available(*, unavailable)
extension PAMConversation: Sendable {}

/// The message styles of a PAM conversation, for the test harness, which cannot import the C module.
package enum PAMMessageStyle: Sendable {
    case promptEchoOff, promptEchoOn, errorMessage, textInfo

    var rawValue: Int32 {
        switch self {
        case .promptEchoOff: Int32(PAM_PROMPT_ECHO_OFF)
        case .promptEchoOn: Int32(PAM_PROMPT_ECHO_ON)
        case .errorMessage: Int32(PAM_ERROR_MSG)
        case .textInfo: Int32(PAM_TEXT_INFO)
        }
    }
}

/// The C type of `pam_conv.conv`, spelled out so that the tests' caller goes through it as libpam does.
private typealias PAMConversationFunction =
    @convention(c) (
        Int32,
        UnsafeMutablePointer<UnsafePointer<pam_message>?>?,
        UnsafeMutablePointer<UnsafeMutablePointer<pam_response>?>?,
        UnsafeMutableRawPointer?
    ) -> Int32

/// The conversation function given to PAM.
///
/// A global function, not a closure: libpam calls it on the PAM thread, and a closure written in
/// `main.swift` would be main-actor isolated and trap there. Replies are `calloc`ed and their
/// strings `malloc`ed because libpam frees both; on failure nothing is returned and what was
/// allocated is wiped and freed here.
func pamConversation(
    count: Int32,
    messages: UnsafeMutablePointer<UnsafePointer<pam_message>?>?,
    responses: UnsafeMutablePointer<UnsafeMutablePointer<pam_response>?>?,
    context: UnsafeMutableRawPointer?
) -> Int32 {
    guard let responses else { return PAM_CONV_ERR }
    responses.pointee = nil
    guard count > 0, count <= PAM_MAX_NUM_MSG, let messages, let context else { return PAM_CONV_ERR }
    let conversation = Unmanaged<PAMConversation>.fromOpaque(context).takeUnretainedValue()
    let total = Int(count)
    guard let memory = calloc(total, MemoryLayout<pam_response>.stride) else { return PAM_BUF_ERR }
    let replies = memory.bindMemory(to: pam_response.self, capacity: total)
    for index in 0..<total {
        guard let message = messages[index] else {
            freeReplies(replies, count: total)
            return PAM_CONV_ERR
        }
        let text = message.pointee.msg.map { String(cString: $0) } ?? ""
        switch message.pointee.msg_style {
        case Int32(PAM_PROMPT_ECHO_OFF), Int32(PAM_PROMPT_ECHO_ON):
            let echo = message.pointee.msg_style == Int32(PAM_PROMPT_ECHO_ON)
            guard let answer = conversation.ask(text, echo: echo) else {
                freeReplies(replies, count: total)
                return PAM_CONV_ERR
            }
            guard let copy = cString(copying: answer) else {
                conversation.failure = KeyAuthError(
                    .invalidArgument, "The answer holds a NUL byte or is longer than PAM accepts.")
                freeReplies(replies, count: total)
                return PAM_CONV_ERR
            }
            replies[index].resp = copy
            replies[index].resp_retcode = 0
        case Int32(PAM_ERROR_MSG):
            conversation.prompter.display(text, isError: true)
        case Int32(PAM_TEXT_INFO):
            conversation.prompter.display(text, isError: false)
        default:
            freeReplies(replies, count: total)
            return PAM_CONV_ERR
        }
    }
    responses.pointee = replies
    return PAM_SUCCESS
}

/// A `malloc`ed, NUL-terminated copy of `secret` for libpam to own, or nil when the secret holds
/// a NUL byte (PAM would silently cut it there) or is longer than PAM accepts.
private func cString(copying secret: SecretBytes) -> UnsafeMutablePointer<CChar>? {
    secret.withUnsafeBytes { bytes in
        guard bytes.count < Int(PAM_MAX_RESP_SIZE), !bytes.contains(0),
            let memory = malloc(bytes.count + 1)
        else { return nil }
        let copy = UnsafeMutableRawBufferPointer(start: memory, count: bytes.count + 1)
        copy.copyMemory(from: bytes)
        copy[bytes.count] = 0
        return memory.bindMemory(to: CChar.self, capacity: bytes.count + 1)
    }
}

/// Wipes and frees replies that are not handed to libpam.
private func freeReplies(_ replies: UnsafeMutablePointer<pam_response>, count: Int) {
    for index in 0..<count {
        if let answer = replies[index].resp {
            OpenSSL.cleanse(UnsafeMutableRawBufferPointer(start: answer, count: strlen(answer)))
            free(answer)
        }
    }
    free(replies)
}

/// Calls the conversation function through its C pointer with fabricated messages, as libpam
/// would, and frees the replies as libpam would: the C half of the test harness
/// (`runPAMConversation` in the test support), which cannot import the C module itself.
///
/// Blocks while the prompter answers, as the conversation does on the PAM thread.
/// - Returns: The conversation's PAM status and, when it succeeded, one reply per message (nil
///   where the message needs none).
package func conversePAM(
    _ messages: [(style: PAMMessageStyle, text: String)], prompter: any SecretReader
) -> (status: Int32, replies: [String?], failure: KeyAuthError?) {
    let conversation = PAMConversation(prompter: prompter)
    let function: PAMConversationFunction = pamConversation
    let texts = messages.map { strdup($0.text) }
    defer { texts.forEach { free($0) } }
    let structures = UnsafeMutablePointer<pam_message>.allocate(capacity: max(messages.count, 1))
    defer { structures.deallocate() }
    for (index, message) in messages.enumerated() {
        (structures + index).initialize(to: pam_message(msg_style: message.style.rawValue, msg: texts[index]))
    }
    var pointers: [UnsafePointer<pam_message>?] = (0..<messages.count).map { UnsafePointer(structures + $0) }
    var replies: UnsafeMutablePointer<pam_response>?
    let status = withExtendedLifetime(conversation) {
        function(
            Int32(messages.count), &pointers, &replies, Unmanaged.passUnretained(conversation).toOpaque())
    }
    var answers: [String?] = []
    if let replies {
        for index in 0..<messages.count {
            answers.append(replies[index].resp.map { String(cString: $0) })
        }
        freeReplies(replies, count: messages.count)
    }
    return (status, answers, conversation.failure)
}
