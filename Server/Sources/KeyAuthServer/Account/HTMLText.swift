/// Text made safe for HTML: every value a page shows (a device name, a user name, an address)
/// goes through ``escape(_:)``, so that nothing a user or a client chose can add markup.
enum HTMLText {
    /// `text` with `&`, `<`, `>`, `"` and `'` as character references: safe in element content
    /// and in quoted attribute values alike.
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
}
