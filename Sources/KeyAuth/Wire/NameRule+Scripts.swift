extension NameRule {
    /// One script, or a combination people write together: the "highly restrictive" level of
    /// UTS #39 section 5.2.
    ///
    /// Every character has a set of scripts (Script_Extensions, augmented as section 5.1 says:
    /// Han goes with the Japanese, Korean and Bopomofo combinations, Hiragana and Katakana with
    /// Japanese, Hangul with Korean); Common and Inherited characters (digits, punctuation,
    /// symbols, most combining marks) go with any. A name is single-script when the sets of all
    /// its characters share a script. Otherwise it passes only when each character shares a
    /// script with Latin + Han + Hiragana + Katakana, with Latin + Han + Bopomofo, or with
    /// Latin + Han + Hangul. So `alice-laptop` with a Cyrillic `а` is refused, and so are Greek
    /// and Latin together, while `東京のlaptop` passes.
    static func checkScripts(_ name: String) throws(NameProblem) {
        let characters = name.unicodeScalars.map { (scalar: $0, scripts: augmentedScripts(of: $0)) }
        var shared: Set<UInt16>?
        for case (_, let scripts?) in characters {
            shared = shared.map { $0.intersection(scripts) } ?? scripts
        }
        guard shared?.isEmpty == true else { return }
        for cover in highlyRestrictiveCovers
        where characters.allSatisfy({ $0.scripts.map { !$0.isDisjoint(with: cover) } ?? true }) {
            return
        }
        throw mixedScripts(characters.map(\.scalar))
    }

    /// The combinations of scripts that UTS #39 lets a highly restrictive string mix.
    private static let highlyRestrictiveCovers: [Set<UInt16>] = [
        [UnicodeScriptTable.latin, UnicodeScriptTable.han, UnicodeScriptTable.hiragana, UnicodeScriptTable.katakana],
        [UnicodeScriptTable.latin, UnicodeScriptTable.han, UnicodeScriptTable.bopomofo],
        [UnicodeScriptTable.latin, UnicodeScriptTable.han, UnicodeScriptTable.hangul],
    ].map { Set($0.map(UInt16.init)) }

    /// The writing systems of section 5.1 that stand for script combinations (Hanb, Jpan, Kore),
    /// numbered after the scripts of the table.
    private static let hanWithBopomofo: UInt16 = 0x100
    private static let japanese: UInt16 = 0x101
    private static let korean: UInt16 = 0x102

    /// The augmented script set of `scalar`, or nil for a character that goes with any script.
    private static func augmentedScripts(of scalar: Unicode.Scalar) -> Set<UInt16>? {
        let extensions = UnicodeScriptTable.extensions(of: scalar)
        if extensions == [UnicodeScriptTable.common] || extensions == [UnicodeScriptTable.inherited] { return nil }
        var scripts = Set(extensions.map(UInt16.init))
        if extensions.contains(UnicodeScriptTable.han) { scripts.formUnion([hanWithBopomofo, japanese, korean]) }
        if extensions.contains(UnicodeScriptTable.hiragana) || extensions.contains(UnicodeScriptTable.katakana) {
            scripts.insert(japanese)
        }
        if extensions.contains(UnicodeScriptTable.hangul) { scripts.insert(korean) }
        if extensions.contains(UnicodeScriptTable.bopomofo) { scripts.insert(hanWithBopomofo) }
        return scripts
    }

    /// "mixes the Latin and Cyrillic scripts (U+0430 CYRILLIC SMALL LETTER A)": the scripts in
    /// the order they appear and, when there are two, the first character of the second.
    private static func mixedScripts(_ scalars: [Unicode.Scalar]) -> NameProblem {
        var scripts: [UInt8] = []
        var firstOfSecond: Unicode.Scalar?
        for scalar in scalars {
            var script = UnicodeScriptTable.script(of: scalar)
            if script == UnicodeScriptTable.common || script == UnicodeScriptTable.inherited {
                // A shared character, such as the prolonged sound mark of Hiragana and Katakana.
                guard let first = UnicodeScriptTable.extensions(of: scalar).min(),
                    first != UnicodeScriptTable.common, first != UnicodeScriptTable.inherited
                else { continue }
                script = first
            }
            guard !scripts.contains(script) else { continue }
            scripts.append(script)
            if scripts.count == 2 { firstOfSecond = scalar }
        }
        let names = scripts.map { Int($0) < UnicodeScriptTable.names.count ? UnicodeScriptTable.names[Int($0)] : "?" }
        let list = names.count > 1 ? names.dropLast().joined(separator: ", ") + " and " + (names.last ?? "") : "several"
        let example = names.count == 2 ? firstOfSecond.map { " (\(describe($0)))" } ?? "" : ""
        return NameProblem(.mixedScripts, "mixes the \(list) scripts\(example)")
    }
}
