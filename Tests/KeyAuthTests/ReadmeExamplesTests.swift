import Foundation
import Testing

/// The repository's root, from this file's place in it.
private let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

/// The README and the manuals under `docs/`, as (path, text).
private func manuals() throws -> [(path: String, text: String)] {
    let docs = try FileManager.default.contentsOfDirectory(atPath: repositoryRoot.appendingPathComponent("docs").path)
    let paths = ["README.md"] + docs.filter { $0.hasSuffix(".md") }.sorted().map { "docs/" + $0 }
    return try paths.map { path in
        (path, try String(contentsOf: repositoryRoot.appendingPathComponent(path), encoding: .utf8))
    }
}

@Suite("The README's and the manuals' code examples")
struct ReadmeExamplesTests {
    @Test(
        "each Swift block of a manual is an Examples/ file as swift build compiles it; each example is shown or linked")
    func readmeShowsTheExamples() throws {
        var shown: [String] = []
        var linked = ""
        for (path, text) in try manuals() {
            let lines = text.components(separatedBy: "\n")
            for (index, line) in lines.enumerated() where line == "```swift" {
                let marker = index > 0 ? lines[index - 1] : ""
                guard marker.hasPrefix("<!-- Examples/"), marker.hasSuffix(" -->") else {
                    Issue.record("the Swift block at \(path) line \(index + 1) is not an Examples/ file")
                    continue
                }
                shown.append(try expectBlockShowsFile(lines, fenceLine: index))
            }
            linked += text.replacingOccurrences(of: "](../", with: "](")
        }
        let examples = try FileManager.default.contentsOfDirectory(
            atPath: repositoryRoot.appendingPathComponent("Examples").path)
        // Every example is shown in full, or, when it is a whole program to copy, linked.
        for example in examples {
            let path = "Examples/\(example)/main.swift"
            #expect(shown.contains(path) || linked.contains("](\(path))"), "no manual shows or links \(path)")
        }
        #expect(!shown.isEmpty)
        let manifest = try String(contentsOf: repositoryRoot.appendingPathComponent("Package.swift"), encoding: .utf8)
        for example in examples { #expect(manifest.contains("path: \"Examples/\(example)\"")) }
    }

    @Test(
        "each block of a manual marked with a docs/ file shows that file as it is, the Apache configuration among them")
    func readmeShowsTheDocsFiles() throws {
        var shown: [String] = []
        for (_, text) in try manuals() {
            let lines = text.components(separatedBy: "\n")
            for (index, line) in lines.enumerated() where line.hasPrefix("<!-- docs/") && line.hasSuffix(" -->") {
                try #require(index + 1 < lines.count && lines[index + 1].hasPrefix("```"), "no block after \(line)")
                shown.append(try expectBlockShowsFile(lines, fenceLine: index + 1))
            }
        }
        #expect(shown.contains("docs/apache-openidc.conf"))
    }

    /// Checks that the fenced block opening at `fenceLine` is the repository file named by the
    /// `<!-- PATH -->` line above it, and returns PATH.
    private func expectBlockShowsFile(_ lines: [String], fenceLine: Int) throws -> String {
        let path = String(lines[fenceLine - 1].dropFirst(5).dropLast(4))
        let end = try #require(lines[(fenceLine + 1)...].firstIndex(of: "```"))
        let block = lines[(fenceLine + 1)..<end].joined(separator: "\n") + "\n"
        let file = try String(contentsOf: repositoryRoot.appendingPathComponent(path), encoding: .utf8)
        #expect(block == file, "a manual shows \(path) differently from the file")
        return path
    }
}
