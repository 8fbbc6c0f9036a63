/// The suggestion after an unknown command or action ("did you mean enroll?"), for `keyauth` and
/// `keyauth-server` alike.
package enum NearestWord {
    /// The one word of `candidates` that `word` most likely mistypes, or nil when none is close:
    /// one edit away (a letter added, dropped, changed, or two neighbours swapped), two for words
    /// of 5 letters or more, or `word` being the start of exactly one candidate (3 letters or more).
    package static func nearest(to word: String, among candidates: [String]) -> String? {
        let typed = Array(word.lowercased())
        guard !typed.isEmpty, typed.count <= 64 else { return nil }
        var best: (candidate: String, distance: Int)?
        for candidate in candidates {
            let distance = Self.distance(typed, Array(candidate))
            guard distance <= (candidate.count >= 5 ? 2 : 1) else { continue }
            if best == nil || distance < (best?.distance ?? .max) { best = (candidate, distance) }
        }
        if let best { return best.candidate }
        let started = candidates.filter { typed.count >= 3 && $0.hasPrefix(String(typed)) }
        return started.count == 1 ? started.first : nil
    }

    /// `; did you mean --server?` for an unknown option as typed (`--sever`, `--sever=x`,
    /// `-server`), naming the nearest of `options` (names without their dashes) by
    /// ``nearest(to:among:)``; empty when none is close.
    package static func optionSuggestion(for option: String, among options: some Sequence<String>) -> String {
        let name = option.drop { $0 == "-" }.prefix { $0 != "=" }
        return nearest(to: String(name), among: options.sorted()).map { "; did you mean --\($0)?" } ?? ""
    }

    /// The optimal string alignment distance: insertions, deletions, substitutions and swaps of
    /// neighbours, each counting one.
    private static func distance(_ a: [Character], _ b: [Character]) -> Int {
        guard !a.isEmpty else { return b.count }
        guard !b.isEmpty else { return a.count }
        var table = [[Int]](repeating: [Int](repeating: 0, count: b.count + 1), count: a.count + 1)
        for i in 0...a.count { table[i][0] = i }
        for j in 0...b.count { table[0][j] = j }
        for i in 1...a.count {
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                var value = min(table[i - 1][j] + 1, table[i][j - 1] + 1, table[i - 1][j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    value = min(value, table[i - 2][j - 2] + 1)
                }
                table[i][j] = value
            }
        }
        return table[a.count][b.count]
    }
}
