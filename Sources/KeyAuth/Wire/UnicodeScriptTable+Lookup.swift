extension UnicodeScriptTable {
    /// The Script property of `scalar`, as a script number (an index of ``names``).
    ///
    /// Only meaningful for code points assigned in ``version``: the others get the script of the
    /// run before them.
    static func script(of scalar: Unicode.Scalar) -> UInt8 {
        UInt8(truncatingIfNeeded: run(containing: scalar, in: scriptRuns))
    }

    /// The Script_Extensions property of `scalar` as script numbers: the scripts a character is
    /// used with, which for most characters is just its script.
    static func extensions(of scalar: Unicode.Scalar) -> [UInt8] {
        let set = Int(run(containing: scalar, in: extensionRuns) & 0xFF)
        guard set > 0, set <= extensionSets.count else { return [script(of: scalar)] }
        return extensionSets[set - 1]
    }

    /// The entry of the run that contains `scalar`: the last whose first code point is not
    /// after it (the tables start at U+0000, so there always is one).
    private static func run(containing scalar: Unicode.Scalar, in runs: [UInt32]) -> UInt32 {
        var low = 0
        var high = runs.count
        while high - low > 1 {
            let middle = low + (high - low) / 2
            if runs[middle] >> 8 <= scalar.value { low = middle } else { high = middle }
        }
        return runs.isEmpty ? 0 : runs[low]
    }
}
