import Foundation

/// The inputs of a fuzz target's corpus and findings, as the replay drivers and the tests read
/// them.
public enum FuzzInputs {
    /// The files named, with the files of named directories in name order (hidden ones left out).
    ///
    /// - Throws: ``FuzzInputError`` for a path that does not exist; file system errors.
    public static func files(_ paths: [String]) throws -> [String] {
        var files: [String] = []
        for path in paths {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
                throw FuzzInputError(description: "no such file or directory: \(path)")
            }
            if isDirectory.boolValue {
                files += try FileManager.default.contentsOfDirectory(atPath: path).filter { !$0.hasPrefix(".") }
                    .sorted().map { path + "/" + $0 }
            } else {
                files.append(path)
            }
        }
        return files
    }

    /// Runs each input of `paths` once through `check`, printing the ones that break an
    /// invariant: what a fuzz target's executable does without libFuzzer.
    ///
    /// - Returns: the exit status: 0 when none broke an invariant, 1 when one did, 70 when the
    ///   inputs could not be read.
    public static func replay(_ paths: [String], name: String, check: ([UInt8]) -> [String]) -> Int32 {
        do {
            var failed = 0
            let files = try files(paths)
            for file in files {
                let violations = check(Array(try Data(contentsOf: URL(fileURLWithPath: file))))
                if !violations.isEmpty {
                    failed += 1
                    print("FAIL \(file)\n  " + violations.joined(separator: "\n  "))
                }
            }
            print("\(name): \(files.count) inputs, \(failed) broke an invariant")
            return failed == 0 ? 0 : 1
        } catch {
            FileHandle.standardError.write(Data("\(name): \(error)\n".utf8))
            return 70
        }
    }
}

/// A fuzz input that cannot be found.
public struct FuzzInputError: Error, CustomStringConvertible {
    public let description: String
}
