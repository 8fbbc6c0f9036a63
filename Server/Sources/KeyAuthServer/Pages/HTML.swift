/// Markup for a page, built by string interpolation that escapes what it is given.
///
/// Every interpolated `String` (and any other `CustomStringConvertible` value: a number, a
/// status) becomes text, with `&`, `<`, `>`, `"` and `'` as character references, safe in element
/// content and in quoted attribute values alike; only another `HTML` value goes in as markup.
/// So a user, device or client name cannot add markup, and forgetting to escape is a type error
/// rather than a hole (the idea of GRDB's `SQL` interpolation):
///
/// ```swift
/// let row: HTML = "<td class=\"name\">\(device.name)</td>"   // the name escaped
/// let page: HTML = "<tbody>\(row)</tbody>"                   // the row as markup, once
/// ```
///
/// A string literal is markup: literals are written here, never received.
struct HTML: Sendable, Equatable, ExpressibleByStringInterpolation {
    /// The markup, ready to send.
    let markup: String

    init(stringLiteral value: String) {
        markup = value
    }

    init(stringInterpolation: Interpolation) {
        markup = stringInterpolation.markup
    }

    private init(markup: String) {
        self.markup = markup
    }

    /// No markup at all.
    static let empty: HTML = ""

    /// The interpolation that escapes values and takes `HTML` as it is.
    struct Interpolation: StringInterpolationProtocol {
        fileprivate var markup = ""

        init(literalCapacity: Int, interpolationCount: Int) {
            markup.reserveCapacity(literalCapacity + 16 * interpolationCount)
        }

        mutating func appendLiteral(_ literal: String) {
            markup += literal
        }

        /// Markup built elsewhere, kept as it is (never escaped twice).
        mutating func appendInterpolation(_ html: HTML) {
            markup += html.markup
        }

        /// Markup that may be absent: nothing for nil.
        mutating func appendInterpolation(_ html: HTML?) {
            if let html { markup += html.markup }
        }

        /// Text: escaped.
        mutating func appendInterpolation<Value: CustomStringConvertible>(_ value: Value) {
            markup += HTML.escape(value.description)
        }
    }

    /// `text` with `&`, `<`, `>`, `"` and `'` as character references.
    static func escape(_ text: String) -> String {
        var output = ""
        output.reserveCapacity(text.utf8.count)
        for character in text.unicodeScalars {
            switch character {
            case "&": output += "&amp;"
            case "<": output += "&lt;"
            case ">": output += "&gt;"
            case "\"": output += "&quot;"
            case "'": output += "&#39;"
            default: output.unicodeScalars.append(character)
            }
        }
        return output
    }

    /// The values joined into one, with `separator` markup between them.
    fileprivate static func joining<Pieces: Sequence<HTML>>(_ pieces: Pieces, separator: HTML) -> HTML {
        HTML(markup: pieces.map(\.markup).joined(separator: separator.markup))
    }
}

extension Sequence<HTML> {
    /// The markup of every element in order, `separator` between each two.
    func joined(separator: HTML = .empty) -> HTML {
        HTML.joining(self, separator: separator)
    }
}
