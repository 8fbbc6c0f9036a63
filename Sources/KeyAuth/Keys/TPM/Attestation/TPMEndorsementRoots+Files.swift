import Foundation

extension TPMEndorsementRoots {
    /// Reads the roots from a PEM file, or from every `*.pem`, `*.crt` and `*.cer` file of a
    /// directory (the form TPM makers publish them in, one file per CA), so that an operator adds
    /// a maker by dropping its files in.
    ///
    /// The roots decide which keys count as held by a TPM, so each file and the directory are
    /// read as ``SecureFile/readTrusted(_:label:limit:)`` reads: whoever else could change them
    /// could make a key of their own pass for a TPM's.
    ///
    /// - Throws: `.invalidArgument` naming the file that cannot be read or holds no certificate,
    ///   or a directory without certificate files; `.keyUnprotected` for a file or directory
    ///   another user could change, a symbolic link, or a file that is not regular.
    package static func load(path: String) throws(KeyAuthError) -> TPMEndorsementRoots {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw KeyAuthError(.invalidArgument, "\(path): no such file or directory")
        }
        var files = [path]
        if isDirectory.boolValue {
            try SecureFile.checkTrustedDirectory(path, label: "--tpm-ca")
            let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
            files = names.filter { name in [".pem", ".crt", ".cer"].contains { name.lowercased().hasSuffix($0) } }
                .sorted().map { path + "/" + $0 }
            guard !files.isEmpty else {
                throw KeyAuthError(.invalidArgument, "\(path): no *.pem, *.crt or *.cer file in the directory")
            }
        }
        var certificates: [[UInt8]] = []
        for file in files {
            let contents = try SecureFile.readTrusted(file, label: "--tpm-ca", limit: 1 << 20)
            do {
                certificates += try TPMEndorsementRoots(pem: contents).certificates
            } catch {
                throw KeyAuthError(.invalidArgument, "\(file): \(error.message)")
            }
        }
        return TPMEndorsementRoots(certificates: certificates)
    }
}
