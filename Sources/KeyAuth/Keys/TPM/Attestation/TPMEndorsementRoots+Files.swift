import Foundation

extension TPMEndorsementRoots {
    /// Reads the roots from a PEM file, or from every `*.pem`, `*.crt` and `*.cer` file of a
    /// directory (the form TPM makers publish them in, one file per CA), so that an operator adds
    /// a maker by dropping its files in.
    ///
    /// - Throws: `.invalidArgument` naming the file that cannot be read or holds no certificate,
    ///   or a directory without certificate files.
    package static func load(path: String) throws(KeyAuthError) -> TPMEndorsementRoots {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw KeyAuthError(.invalidArgument, "\(path): no such file or directory")
        }
        var files = [path]
        if isDirectory.boolValue {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
            files = names.filter { name in [".pem", ".crt", ".cer"].contains { name.lowercased().hasSuffix($0) } }
                .sorted().map { path + "/" + $0 }
            guard !files.isEmpty else {
                throw KeyAuthError(.invalidArgument, "\(path): no *.pem, *.crt or *.cer file in the directory")
            }
        }
        var certificates: [[UInt8]] = []
        for file in files {
            guard let contents = FileManager.default.contents(atPath: file) else {
                throw KeyAuthError(.invalidArgument, "\(file): cannot be read")
            }
            do {
                certificates += try TPMEndorsementRoots(pem: Array(contents)).certificates
            } catch {
                throw KeyAuthError(.invalidArgument, "\(file): \(error.message)")
            }
        }
        return TPMEndorsementRoots(certificates: certificates)
    }
}
