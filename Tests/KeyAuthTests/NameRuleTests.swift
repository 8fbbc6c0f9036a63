import Testing

@testable import KeyAuth

@Suite("The rule for names people see (device names, binding messages)")
struct NameRuleTests {
    /// The code of the problem `NameRule.deviceName` finds in `name`, nil when it accepts it.
    private func problem(_ name: String, _ rule: NameRule = .deviceName) -> NameProblem? {
        do {
            _ = try rule.normalize(name)
            return nil
        } catch {
            return error
        }
    }

    @Test(
        "names in one script, or Latin with Han and kana, hangul or bopomofo, pass",
        arguments: [
            "alice-laptop", "Work laptop 2", "alice@home.example", "Café", "Máy tính của Việt", "Ноутбук Алисы",
            "Ελένη λάπτοπ", "東京のノートパソコン", "민수의 노트북", "alice の MacBook", "Minsu의 laptop", "ㄅㄆ電腦 pc",
            "राहुल का लैपटॉप", "โน้ตบุ๊ก", "מַחְשֵׁב", "لپ تاپ", "🍎 laptop", "🇩🇪 Büro", "Pay 12 € – Bob's",
            "ThinkPad X1 (2024)", "my-host.example.com",
        ])
    func accepted(name: String) throws {
        #expect(problem(name) == nil, "\(name): \(problem(name)?.description ?? "")")
    }

    @Test("the issue's 38 KB name of 16 characters, made of combining marks, is refused by its length in bytes")
    func combiningMarkFlood() {
        let character = "a" + String(repeating: "\u{301}\u{300}\u{302}\u{303}", count: 300)
        let name = String(repeating: character, count: 16)
        #expect(name.count == 16)
        #expect(name.utf8.count > 38_000)
        let found = problem(name)
        #expect(found?.code == .tooLong)
        #expect(found?.description == "is longer than 256 bytes in UTF-8")
    }

    @Test("combining marks: at most 4 in a row, never the same twice in a row, never first")
    func combiningMarks() {
        #expect(problem("a\u{301}\u{300}\u{302}\u{303}b") == nil)
        #expect(problem("a\u{301}\u{300}\u{302}\u{303}\u{304}b")?.code == .combiningMarks)
        // Counted after decomposition: ế is e with two marks, so two more make 4, three more 5.
        #expect(problem("\u{1EBF}\u{323}\u{330}") == nil)
        #expect(problem("\u{1EBF}\u{323}\u{330}\u{331}")?.code == .combiningMarks)
        #expect(
            problem("laptop\u{301}\u{301}")?.description
                == "repeats the combining mark U+0301 COMBINING ACUTE ACCENT on one letter")
        #expect(problem("\u{301}laptop")?.code == .combiningMarks)
    }

    @Test(
        "invisible characters are refused by name, whether default-ignorable or blank glyphs",
        arguments: [
            0x3164, 0x2800, 0x115F, 0x1160, 0xFFA0, 0x200B, 0x200C, 0x200D, 0x2060, 0x202E, 0x2066, 0x061C, 0x00AD,
            0x034F, 0xFE0F, 0x180E, 0xE0041, 0x1D159, 0x16FE4,
        ] as [UInt32])
    func invisible(value: UInt32) throws {
        let scalar = try #require(Unicode.Scalar(value))
        for name in ["alice\(scalar)laptop", "\(scalar)", "laptop\(scalar)"] {
            let found = problem(name)
            #expect(found?.code == .invisible, "U+\(String(value, radix: 16)): \(found?.description ?? "accepted")")
            #expect(found?.description.hasPrefix("contains an invisible character, U+") == true)
        }
    }

    @Test("the messages name the code point and never repeat the name")
    func messages() {
        #expect(problem("\u{2800}")?.description == "contains an invisible character, U+2800 BRAILLE PATTERN BLANK")
        #expect(
            problem("alice-l\u{430}ptop")?.description
                == "mixes the Latin and Cyrillic scripts (U+0430 CYRILLIC SMALL LETTER A)")
        #expect(problem("lap\u{7}top")?.description == "contains a control character, U+0007")
        #expect(
            problem("secret\u{202E}")?.description == "contains an invisible character, U+202E RIGHT-TO-LEFT OVERRIDE")
        let long = String(repeating: "secret", count: 10_000)
        #expect(problem(long)?.description == "is longer than 256 bytes in UTF-8")
    }

    @Test(
        "mixed-script confusables are refused (UTS #39, highly restrictive)",
        arguments: [
            ("alice-l\u{430}ptop", "Latin and Cyrillic"),  // Cyrillic а
            ("g\u{3BF}\u{3BF}gle", "Latin and Greek"),  // Greek ο
            ("\u{440}\u{430}yp\u{430}l", "Cyrillic and Latin"),
            ("\u{435}xample", "Cyrillic and Latin"),
            ("東京の노트북", "Han, Hiragana and Hangul"),  // Japanese and Korean together
            ("laptop Ж 電", "Latin, Cyrillic and Han"),
            ("ー\u{436}", "Hiragana and Cyrillic"),  // U+30FC goes with Hiragana and Katakana only
        ])
    func mixedScripts(name: String, scripts: String) {
        let found = problem(name)
        #expect(found?.code == .mixedScripts)
        #expect(found?.description.hasPrefix("mixes the \(scripts) scripts") == true, "\(found?.description ?? "")")
    }

    @Test("input is normalized to NFC: a letter and its accent become one, and are compared so")
    func nfc() throws {
        let decomposed = "Cafe\u{301}"
        let normalized = try NameRule.deviceName.normalize(decomposed)
        #expect(Array(normalized.unicodeScalars) == Array("Caf\u{E9}".unicodeScalars))
        #expect(try NameRule.deviceName.normalize("e\u{301}") == "\u{E9}")
        // A canonical singleton (ANGSTROM SIGN) becomes the letter it stands for.
        #expect(Array(try NameRule.deviceName.normalize("\u{212B}").unicodeScalars) == ["\u{C5}"])
    }

    @Test("spaces: U+0020 alone, inside, one at a time")
    func spaces() {
        for name in [" laptop", "laptop ", "lap  top", " "] {
            #expect(problem(name)?.code == .space, "\(name)")
        }
        for scalar in ["\u{A0}", "\u{2009}", "\u{3000}", "\u{1680}", "\u{2028}", "\u{2029}"] {
            #expect(problem("lap\(scalar)top")?.code == .space)
        }
        #expect(problem("lap\ttop")?.code == .control)
        #expect(problem("lap\ntop")?.code == .control)
    }

    @Test("compatibility forms of letters and digits, and digits of two systems, are refused")
    func lookAlikeForms() {
        for name in ["\u{1D41A}lice", "\u{FF41}lice", "laptop\u{2460}", "\u{FB01}le", "x\u{B2}", "\u{2163}"] {
            #expect(problem(name)?.code == .compatibilityForm, "\(name)")
        }
        #expect(problem("laptop 1\u{662}")?.code == .mixedDigits)
        #expect(problem("\u{661}\u{662}\u{663}") == nil)
        #expect(problem("PC-2024") == nil)
    }

    @Test("unassigned, private-use and newer-than-the-table code points are refused")
    func unassigned() throws {
        #expect(problem("a\u{378}")?.code == .unassigned)
        #expect(problem("a\u{E000}")?.code == .control)
        #expect(problem("a\u{10FFFF}")?.code == .unassigned)
        // U+1FAE9 (Unicode 16.0) is assigned for Swift but has no script in the 15.0 table.
        let newer = try #require(Unicode.Scalar(0x1FAE9))
        if newer.properties.age.map({ $0.major >= 16 }) == true {
            #expect(problem("a\(newer)")?.description.contains("newer than the Unicode 15.0") == true)
        }
    }

    @Test("device names: 64 characters, 128 code points, 256 bytes; binding messages half")
    func lengths() {
        #expect(problem("")?.code == .empty)
        #expect(problem(String(repeating: "a", count: 64)) == nil)
        #expect(problem(String(repeating: "a", count: 65))?.description == "is longer than 64 characters")
        #expect(problem(String(repeating: "東", count: 64)) == nil)  // 192 bytes
        #expect(problem(String(repeating: "\u{20000}", count: 64)) == nil)  // 256 bytes
        #expect(problem(String(repeating: "\u{20000}", count: 65))?.code == .tooLong)
        // 64 characters of a letter and a mark each (x has no precomposed form with an acute
        // accent): 128 code points pass, one more does not.
        #expect(problem(String(repeating: "x\u{301}", count: 64)) == nil)
        #expect(
            problem(String(repeating: "x\u{301}", count: 64) + "x")?.description
                == "has more than 128 Unicode code points")
        #expect(problem(String(repeating: "7", count: 32), .bindingMessage) == nil)
        #expect(problem(String(repeating: "7", count: 33), .bindingMessage)?.code == .tooLong)
        #expect(problem("Pay 12 € to Bob", .bindingMessage) == nil)
        #expect(problem("AB\u{2800}12", .bindingMessage)?.code == .invisible)
    }

    @Test("the script table answers as Unicode's Scripts.txt and ScriptExtensions.txt do")
    func scriptTable() {
        func name(_ scalar: Unicode.Scalar) -> String {
            UnicodeScriptTable.names[Int(UnicodeScriptTable.script(of: scalar))]
        }
        #expect(name("a") == "Latin")
        #expect(name("\u{430}") == "Cyrillic")
        #expect(name("\u{3BF}") == "Greek")
        #expect(name("7") == "Common")
        #expect(name("\u{301}") == "Inherited")
        #expect(name("東") == "Han")
        #expect(name("\u{0}") == "Common")
        let prolonged = UnicodeScriptTable.extensions(of: "\u{30FC}")
        #expect(Set(prolonged) == [UnicodeScriptTable.hiragana, UnicodeScriptTable.katakana])
        #expect(UnicodeScriptTable.extensions(of: "a") == [UnicodeScriptTable.latin])
    }

    @Test(
        "every code point of planes 0 and 1, alone or between letters, gets an answer; what passes, passes unchanged"
    )
    func everyCodePoint() throws {
        var accepted = 0
        // The planes where scripts differ (planes 2 and 3 are Han, 15 and 16 private use), and tags
        // and variation selectors: the whole code space takes a minute in a debug build.
        for value in Array(UInt32(0)...0x1FFFF) + Array(0xE0000...0xE01EF) {
            guard let scalar = Unicode.Scalar(value) else { continue }
            for name in ["\(scalar)", "a\(scalar)b"] {
                guard let normalized = try? NameRule.deviceName.normalize(name) else { continue }
                accepted += 1
                #expect(try NameRule.deviceName.normalize(normalized) == normalized, "U+\(String(value, radix: 16))")
            }
        }
        // Letters, digits, symbols and punctuation of most scripts pass alone.
        #expect(accepted > 100_000)
    }

    @Test("user names: the safe ASCII set, starting with a letter or digit")
    func users() {
        for user in ["alice", "a", "Alice.Smith", "alice@example.com", "svc_backup-2", "7eleven"] {
            #expect(InputRules.isValidUser(user), "\(user)")
        }
        for user in [
            "", ".", "..", "-alice", ".hidden", "_svc", "@home", "al ice", "al/ice", "älice",
            String(repeating: "a", count: 65),
        ] {
            #expect(!InputRules.isValidUser(user), "\(user)")
        }
    }
}
