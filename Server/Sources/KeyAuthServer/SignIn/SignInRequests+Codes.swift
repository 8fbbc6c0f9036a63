import KeyAuth

/// The code a sign-in request's approval types, and the text shown beside its prompt: nothing
/// a device shows beside the prompt may read as the code.
extension SignInRequests {
    /// A number from 10 to 99, drawn uniformly: short enough to type, and a user who types what
    /// they see cannot approve someone else's request by chance more often than one time in 90.
    ///
    /// When the number appears among the digits of `shown` (``digitSkeleton(_:)``), what the
    /// device shows beside the prompt, a number from 100 to 999 that does not takes its place:
    /// there it would read as the answer. The 2-digit draw itself stays uniform: drawing only
    /// among the numbers `shown` lacks would let whoever wrote it (a pending device's name)
    /// narrow the code to the few it leaves.
    static func makeBindingCode(avoiding shown: String = "") throws -> String {
        let digits = digitSkeleton(shown)
        let code = String(10 + (try uniform(below: 90)))
        guard digits.contains(code) else { return code }
        for _ in 0..<64 {
            let longer = String(100 + (try uniform(below: 900)))
            if !digits.contains(longer) { return longer }
        }
        throw ServiceError(
            .invalidRequest, "the request's details hold too many numbers for a code to be told apart from them")
    }

    /// A number below `count` (at most 65,536), every one as likely as another.
    private static func uniform(below count: Int) throws -> Int {
        let limit = 65_536 - 65_536 % count
        while true {
            let bytes = try CryptoPrimitives.randomBytes(count: 2)
            let value = Int(bytes[0]) << 8 | Int(bytes[1])
            if value < limit { return value % count }
        }
    }

    /// The digits of `text` as a screen shows them: a decimal digit of any script as its ASCII
    /// digit, a combining mark or an invisible character as nothing, anything else as a space.
    /// `5\u{301}7` and Arabic-Indic `٥٧` read as 57.
    static func digitSkeleton(_ text: String) -> String {
        var skeleton = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            let properties = scalar.properties
            if properties.numericType == .decimal, let value = properties.numericValue, (0...9).contains(value) {
                skeleton.append(Unicode.Scalar(UInt8(48 + Int(value))))
            } else if properties.isDefaultIgnorableCodePoint
                || [.nonspacingMark, .spacingMark, .enclosingMark].contains(properties.generalCategory)
            {
                continue
            } else {
                skeleton.append(" ")
            }
        }
        return String(skeleton)
    }

    /// What the approving device shows beside the prompt for a server-made code, of what
    /// whoever asked chose (a pending device's name, key id and address, the address asking, the
    /// scope, a redirect URI's port), and the client's name: a code found in it is made longer
    /// (``makeBindingCode(avoiding:)``).
    func shownText(
        clientID: String?, scope: String?, address: String?, redirectURI: String?, subject: String?
    ) throws -> String {
        var parts = [scope, address, redirectURI, subject].compactMap { $0 }
        if let clientID, let client = try storage.client(id: clientID) { parts.append(client.name) }
        if let subject, let device = try storage.device(kid: subject) {
            parts += [device.name, device.registeredFrom ?? ""]
        }
        return parts.joined(separator: " ")
    }

    /// Refuses a client's binding message that the text shown beside it at the device spells
    /// out (``shownText(clientID:scope:address:redirectURI:subject:)``: the client's name, the
    /// address the request came from): a user could type it from the prompt without reading the
    /// client's screen, which is what number matching asks. A message of ASCII digits alone is
    /// compared as digits (`57` is in `10.0.0.57` and in `٥٧`), any other as the text typed.
    static func checkApart(_ message: String, from shown: String) throws(ServiceError) {
        let code = normalizedCode(message)
        guard !code.isEmpty else { return }
        let isNumber = code.unicodeScalars.allSatisfy { ("0"..."9").contains($0) }
        guard isNumber ? digitSkeleton(shown).contains(code) : shown.lowercased().contains(code) else { return }
        throw ServiceError(
            .invalidBindingMessage,
            "binding_message appears in what the device shows beside it (the client's name, the address "
                + "the request came from), so it could be typed without reading it; send another")
    }

    /// Refuses a client's binding message that the user could type without reading it off the
    /// client's screen: one with no digit, which a word typed to refuse ("stop", "not me") could
    /// match, and one that the request's scope, shown beside the prompt, spells out.
    static func checkTyped(_ message: String, shownWith scope: String?) throws(ServiceError) {
        guard message.unicodeScalars.contains(where: { ("0"..."9").contains($0) }) else {
            throw ServiceError(
                .invalidBindingMessage,
                "binding_message must hold a digit (0-9), so that no word typed to refuse at the device can match it")
        }
        if let scope, scope.lowercased().contains(normalizedCode(message)) {
            throw ServiceError(
                .invalidScope, "scope may not hold the binding_message, which the device shows beside it")
        }
    }
}
