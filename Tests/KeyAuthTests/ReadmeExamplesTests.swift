import Foundation
import Testing

/// The repository's root, from this file's place in it.
private let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

@Suite("The README's code examples")
struct ReadmeExamplesTests {
    @Test("every Swift block in the README is an Examples/ file that swift build compiles, shown as it is")
    func readmeShowsTheExamples() throws {
        let readme = try String(contentsOf: repositoryRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let lines = readme.components(separatedBy: "\n")
        var shown: [String] = []
        for (index, line) in lines.enumerated() where line == "```swift" {
            let marker = index > 0 ? lines[index - 1] : ""
            guard marker.hasPrefix("<!-- Examples/"), marker.hasSuffix(" -->") else {
                Issue.record("the Swift block at README line \(index + 1) is not an Examples/ file")
                continue
            }
            let path = String(marker.dropFirst(5).dropLast(4))
            let end = try #require(lines[(index + 1)...].firstIndex(of: "```"))
            let block = lines[(index + 1)..<end].joined(separator: "\n") + "\n"
            let file = try String(contentsOf: repositoryRoot.appendingPathComponent(path), encoding: .utf8)
            #expect(block == file, "README shows \(path) differently from the file")
            shown.append(path)
        }
        let examples = try FileManager.default.contentsOfDirectory(
            atPath: repositoryRoot.appendingPathComponent("Examples").path)
        #expect(Set(shown) == Set(examples.map { "Examples/\($0)/main.swift" }))
        let manifest = try String(contentsOf: repositoryRoot.appendingPathComponent("Package.swift"), encoding: .utf8)
        for example in examples { #expect(manifest.contains("path: \"Examples/\(example)\"")) }
    }
}
