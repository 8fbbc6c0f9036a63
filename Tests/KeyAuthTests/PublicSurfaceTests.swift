import Foundation
import Testing

/// The repository's root, from this file's place in it (Tests/KeyAuthTests/).
private let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

/// Every file under `folder` (relative to the repository's root) whose name ends in `.swift`,
/// as paths relative to the root.
private func swiftFiles(under folder: String) throws -> [String] {
    let base = repositoryRoot.appendingPathComponent(folder)
    let names = try FileManager.default.subpathsOfDirectory(atPath: base.path)
    return names.filter { $0.hasSuffix(".swift") }.map { folder + "/" + $0 }.sorted()
}

/// The text of the file at `path`, relative to the repository's root.
private func contents(of path: String) throws -> String {
    try String(contentsOf: repositoryRoot.appendingPathComponent(path), encoding: .utf8)
}

/// The library's public API is what its documentation lists: an app sees exactly the types the
/// DocC catalog's topics name, so that a type made public in passing (shared with the command or
/// the server, which `package` serves) shows up here instead of in every app's autocompletion.
@Suite("The library's public surface")
struct PublicSurfaceTests {
    /// The top-level public types declared in `Sources/KeyAuth`. Nested public types (such as
    /// `KeyAuthError.Code`) are documented on their parent's page, so only top-level ones count.
    private func publicTypes() throws -> Set<String> {
        let declaration =
            #/^(?:@\w+(?:\([^)\n]*\))? )*public (?:final |indirect )?(?:class|struct|enum|protocol|actor|typealias) (\w+)/#
            .anchorsMatchLineEndings()
        var names: Set<String> = []
        for path in try swiftFiles(under: "Sources/KeyAuth") {
            for match in try contents(of: path).matches(of: declaration) { names.insert(String(match.output.1)) }
        }
        return names
    }

    /// The symbols the catalog's root page lists under its Topics heading.
    private func topicSymbols() throws -> Set<String> {
        let page = try contents(of: "Sources/KeyAuth/KeyAuth.docc/KeyAuth.md")
        let topics = try #require(page.range(of: "\n## Topics\n"), "KeyAuth.md has no Topics section")
        let symbol = #/^- ``(\w+)``$/#.anchorsMatchLineEndings()
        return Set(page[topics.upperBound...].matches(of: symbol).map { String($0.output.1) })
    }

    @Test("every public type of the library is listed in the DocC topics")
    func everyPublicTypeIsListed() throws {
        let types = try publicTypes()
        #expect(types.contains("Authenticator"), "the declaration pattern found no public types")
        let unlisted = types.subtracting(try topicSymbols()).sorted()
        #expect(
            unlisted.isEmpty,
            "public but not in KeyAuth.docc/KeyAuth.md's topics (list it, or make it package): \(unlisted)")
    }

    @Test("every type the DocC topics list is public")
    func everyListedTypeIsPublic() throws {
        let listed = try topicSymbols()
        #expect(listed.contains("KeyAuthError"), "the topics pattern found no symbols")
        let hidden = listed.subtracting(try publicTypes()).sorted()
        #expect(hidden.isEmpty, "listed in KeyAuth.docc/KeyAuth.md's topics but not a public type: \(hidden)")
    }

    /// The folders of code that ships or measures (the tests' own files are not held to it).
    static let limitedFolders = ["Sources", "Server/Sources", "Examples", "Fuzz", "Benchmarks"]

    @Test("no Swift source file is over 400 lines", arguments: limitedFolders)
    func sourceFilesStayShort(folder: String) throws {
        let files = try swiftFiles(under: folder)
        #expect(!files.isEmpty, "no Swift files under \(folder)")
        for path in files {
            let lines = try contents(of: path).reduce(0) { $1 == "\n" ? $0 + 1 : $0 }
            #expect(lines <= 400, "\(path) has \(lines) lines: split it by concern")
        }
    }
}
