/// Rows printed in aligned columns for the admin commands: each column as wide as its widest
/// cell plus two spaces, the last column unpadded, so that `column -t` is not needed and
/// `awk '{print $1}'` still reads the first column.
struct TextTable {
    let header: [String]
    var rows: [[String]] = []

    /// The table as lines, each ending in a newline; empty cells print as `-`, and control
    /// characters as `?`, so that a row stays one line and stored text (a device name, an audit
    /// detail) cannot move the terminal's cursor or hide a row.
    var rendered: String {
        let all = [header] + rows.map { $0.map { $0.isEmpty ? "-" : Self.printable($0) } }
        var widths = [Int](repeating: 0, count: header.count)
        for row in all {
            for (index, cell) in row.enumerated() where index < widths.count {
                widths[index] = max(widths[index], cell.count)
            }
        }
        return all.map { row in
            var line = ""
            for (index, cell) in row.enumerated() {
                line += cell
                guard index < row.count - 1 else { continue }
                // A cell past the header's columns (no listing makes one) is set off by the two
                // spaces alone rather than indexing past the widths.
                let width = index < widths.count ? widths[index] : cell.count
                line += String(repeating: " ", count: width - cell.count + 2)
            }
            return line + "\n"
        }.joined()
    }

    private static func printable(_ cell: String) -> String {
        guard cell.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else { return cell }
        return String(
            String.UnicodeScalarView(
                cell.unicodeScalars.map { $0.properties.generalCategory == .control ? "?" : $0 }))
    }
}
