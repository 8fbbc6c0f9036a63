import Foundation

/// The rule for text that people read and compare on another screen: device names, binding
/// messages and client names (PROTOCOL.md sections 4 and 8).
///
/// A name reaches approval prompts, device lists and the account page, where a person decides
/// whether a device or a sign-in is theirs. So a name must look like what it is: bounded in
/// what people see (characters) and in what machines hold (scalars, bytes), with no invisible or
/// blank characters, no stacks of combining marks, no compatibility look-alikes of letters and
/// digits, and no mixing of scripts beyond what Unicode Technical Standard #39 calls "highly
/// restrictive" (so that a Cyrillic `а` cannot pass for a Latin `a`). Names are compared and
/// stored in NFC, the form the rule returns.
///
/// The client checks with the same rule before it generates a key, the server on every request.
package struct NameRule: Sendable {
    /// The most characters (grapheme clusters, what a reader counts).
    package let maximumCharacters: Int
    /// The most Unicode scalars (code points).
    package let maximumScalars: Int
    /// The most bytes in UTF-8.
    package let maximumBytes: Int

    /// Device names, and client names: 64 characters, 128 scalars, 256 bytes.
    package static let deviceName = NameRule(maximumCharacters: 64, maximumScalars: 128, maximumBytes: 256)

    /// Binding messages of sign-in requests: 32 characters (a code to compare at a glance),
    /// 64 scalars, 128 bytes.
    package static let bindingMessage = NameRule(maximumCharacters: 32, maximumScalars: 64, maximumBytes: 128)

    /// The most nonspacing marks in a row after canonical decomposition: what UTS #39 section 5.4
    /// suggests, enough for Vietnamese, Hebrew with points or Indic conjuncts, too few to stack
    /// marks over the neighbouring lines.
    package static let maximumMarksInARow = 4

    /// The name as it is stored and shown: `text` in NFC, when it follows the rule.
    ///
    /// - Throws: ``NameProblem`` saying what is wrong, naming at most one code point and never
    ///   repeating the text.
    package func normalize(_ text: String) throws(NameProblem) -> String {
        guard !text.isEmpty else { throw NameProblem(.empty, "is empty") }
        // Normalization costs time in the input's length: huge input is refused before it. NFC
        // can shorten text (a letter and its accent become one), hence the slack.
        try checkBytes(text, limit: 2 * maximumBytes)
        let name = text.precomposedStringWithCanonicalMapping
        try checkBytes(name, limit: maximumBytes)
        guard name.unicodeScalars.count <= maximumScalars else {
            throw NameProblem(.tooLong, "has more than \(maximumScalars) Unicode code points")
        }
        guard name.count <= maximumCharacters else {
            throw NameProblem(.tooLong, "is longer than \(maximumCharacters) characters")
        }
        try Self.checkCharacters(name)
        try Self.checkSpaces(name)
        try Self.checkMarks(name)
        try Self.checkDigits(name)
        try Self.checkScripts(name)
        return name
    }

    /// Whether `text` follows the rule (in whatever normalization form it comes).
    package func accepts(_ text: String) -> Bool {
        (try? normalize(text)) != nil
    }

    private func checkBytes(_ text: String, limit: Int) throws(NameProblem) {
        guard text.utf8.count <= limit else {
            throw NameProblem(.tooLong, "is longer than \(maximumBytes) bytes in UTF-8")
        }
    }

    /// Code points that are not there to be seen, not assigned, or of no use in a name.
    private static func checkCharacters(_ name: String) throws(NameProblem) {
        for scalar in name.unicodeScalars {
            let properties = scalar.properties
            guard let age = properties.age, properties.generalCategory != .unassigned else {
                throw NameProblem(.unassigned, "contains an unassigned code point, \(describe(scalar))")
            }
            guard
                (age.major, age.minor) <= (UnicodeScriptTable.version.major, UnicodeScriptTable.version.minor)
            else {
                throw NameProblem(
                    .unassigned,
                    "contains \(describe(scalar)), which is newer than the Unicode "
                        + "\(UnicodeScriptTable.version.major).\(UnicodeScriptTable.version.minor) this rule knows")
            }
            switch properties.generalCategory {
            case .control:
                throw NameProblem(.control, "contains a control character, \(describe(scalar))")
            case .privateUse, .surrogate:
                throw NameProblem(.control, "contains a private-use character, \(describe(scalar))")
            case .spaceSeparator where scalar != " ", .lineSeparator, .paragraphSeparator:
                throw NameProblem(.space, "contains a space other than U+0020, \(describe(scalar))")
            default:
                break
            }
            if properties.isDefaultIgnorableCodePoint || properties.generalCategory == .format
                || blanks.contains(scalar.value)
            {
                throw NameProblem(.invisible, "contains an invisible character, \(describe(scalar))")
            }
            if properties.generalCategory.isLetterOrNumber {
                let alone = String(scalar)
                if alone.precomposedStringWithCompatibilityMapping != alone {
                    throw NameProblem(
                        .compatibilityForm,
                        "contains \(describe(scalar)), a compatibility form of a letter or digit; "
                            + "use the ordinary one")
                }
            }
        }
    }

    /// Characters that show nothing but are neither default-ignorable nor spaces, so that the
    /// properties above let them through (U+2800 is what renders blank where U+3164 is refused),
    /// and the Hangul fillers, which are default-ignorable today: they have made blank names.
    private static let blanks: Set<UInt32> = [0x115F, 0x1160, 0x2800, 0x3164, 0xFFA0, 0x16FE4, 0x1D159]

    /// Spaces: U+0020 only, one at a time, and not at either end, where nobody sees it.
    private static func checkSpaces(_ name: String) throws(NameProblem) {
        guard name.first != " ", name.last != " " else {
            throw NameProblem(.space, "starts or ends with a space")
        }
        guard !name.contains("  ") else { throw NameProblem(.space, "has two spaces in a row") }
    }

    /// Combining marks: not first (it would sit on whatever is shown before the name), at most
    /// ``maximumMarksInARow`` nonspacing marks in a row and never the same one twice in a row
    /// (UTS #39 section 5.4), counted after canonical decomposition.
    private static func checkMarks(_ name: String) throws(NameProblem) {
        if let first = name.unicodeScalars.first, first.properties.generalCategory.isMark {
            throw NameProblem(.combiningMarks, "starts with a combining mark, \(describe(first))")
        }
        var run = 0
        var previous: Unicode.Scalar?
        for scalar in name.decomposedStringWithCanonicalMapping.unicodeScalars {
            switch scalar.properties.generalCategory {
            case .nonspacingMark, .enclosingMark:
                run += 1
                guard run <= maximumMarksInARow else {
                    throw NameProblem(
                        .combiningMarks, "has more than \(maximumMarksInARow) combining marks on one letter")
                }
                guard scalar != previous else {
                    throw NameProblem(.combiningMarks, "repeats the combining mark \(describe(scalar)) on one letter")
                }
            default:
                run = 0
            }
            previous = scalar
        }
    }

    /// Decimal digits from one system only (UTS #39 section 5.3), so that `1` and a bold `𝟏`
    /// or an Arabic-Indic `١` do not stand for each other.
    private static func checkDigits(_ name: String) throws(NameProblem) {
        var zero: UInt32?
        for scalar in name.unicodeScalars where scalar.properties.numericType == .decimal {
            guard let value = scalar.properties.numericValue, let digit = UInt32(exactly: value),
                digit <= scalar.value
            else { continue }
            let systemZero = scalar.value - digit
            if let zero, zero != systemZero {
                throw NameProblem(.mixedDigits, "mixes digits of different number systems, \(describe(scalar))")
            }
            zero = systemZero
        }
    }

    /// `U+0430 CYRILLIC SMALL LETTER A`: the code point and its name, never the text around it.
    static func describe(_ scalar: Unicode.Scalar) -> String {
        var hex = String(scalar.value, radix: 16, uppercase: true)
        if hex.count < 4 { hex = String(repeating: "0", count: 4 - hex.count) + hex }
        guard let name = scalar.properties.name ?? scalar.properties.nameAlias else { return "U+\(hex)" }
        return "U+\(hex) \(name)"
    }
}

/// What is wrong with a name, as a phrase that follows the field's name: `"name" is empty`.
package struct NameProblem: Error, Sendable, Equatable, CustomStringConvertible {
    /// The kinds of problem, for tests and callers that decide by kind.
    package enum Code: Sendable, Equatable {
        case empty, tooLong, unassigned, control, space, invisible, compatibilityForm, combiningMarks, mixedDigits,
            mixedScripts
    }

    /// The kind of problem.
    package let code: Code
    /// The phrase, such as `contains an invisible character, U+2800 BRAILLE PATTERN BLANK`.
    package let description: String

    package init(_ code: Code, _ description: String) {
        self.code = code
        self.description = description
    }
}

extension Unicode.GeneralCategory {
    fileprivate var isMark: Bool {
        self == .nonspacingMark || self == .spacingMark || self == .enclosingMark
    }

    fileprivate var isLetterOrNumber: Bool {
        switch self {
        case .uppercaseLetter, .lowercaseLetter, .titlecaseLetter, .modifierLetter, .otherLetter, .decimalNumber,
            .letterNumber, .otherNumber:
            true
        default:
            false
        }
    }
}
