import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

/// Files that decide whom the server trusts (`--tpm-ca`, `--ssh-principals-file`): read only when
/// nobody but root or the server's user could have changed them, since whoever could would make
/// the server trust a key of their own.
@Suite("Trusted files: TPM makers' roots and SSH principals", .timeLimit(.minutes(10)))
struct TrustedFileTests {
    /// A self-signed certificate, as a TPM maker's root is published.
    private static func certificate(in directory: String) throws -> String {
        let path = directory + "/maker.pem"
        let made = try ExternalCommand.run(
            [
                "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", directory + "/maker.key", "-out", path, "-days", "30", "-subj", "/CN=test TPM maker",
            ], timeout: 60)
        guard made.status == 0 else { throw TestFailure("openssl req failed: \(made.errorOutput)") }
        return path
    }

    private static func code(_ path: String) -> KeyAuthError.Code? {
        do {
            _ = try TPMEndorsementRoots.load(path: path)
            return nil
        } catch {
            return error.code
        }
    }

    @Test("TPM roots in a directory or file only others could change are refused; the same files kept private load")
    func tpmRoots() throws {
        let scratch = TemporaryDirectory("keyauth-trusted")
        defer { scratch.remove() }
        let roots = scratch.path + "/roots"
        try FileManager.default.createDirectory(atPath: roots, withIntermediateDirectories: false)
        let file = try Self.certificate(in: roots)
        chmod(file, 0o644)
        chmod(roots, 0o755)
        #expect(try TPMEndorsementRoots.load(path: roots).certificates.count == 1)
        #expect(try TPMEndorsementRoots.load(path: file).certificates.count == 1)

        // A directory anyone may write to: anyone could add their own maker.
        chmod(roots, 0o777)
        #expect(Self.code(roots) == .keyUnprotected)
        chmod(roots, 0o1775)
        #expect(Self.code(roots) == .keyUnprotected)
        chmod(roots, 0o755)
        // A file the group may change.
        chmod(file, 0o664)
        #expect(Self.code(roots) == .keyUnprotected)
        #expect(Self.code(file) == .keyUnprotected)
        chmod(file, 0o644)
        // A symbolic link among the files, and a FIFO (refused, not waited on).
        try FileManager.default.createSymbolicLink(atPath: roots + "/linked.pem", withDestinationPath: file)
        #expect(Self.code(roots) == .keyUnprotected)
        unlink(roots + "/linked.pem")
        #expect(mkfifo(roots + "/pipe.pem", 0o644) == 0)
        #expect(Self.code(roots) == .keyUnprotected)
        unlink(roots + "/pipe.pem")
        #expect(try TPMEndorsementRoots.load(path: roots).certificates.count == 1)
    }

    @Test("a trusted file larger than its limit is refused with the size in the message")
    func sizeLimit() throws {
        let scratch = TemporaryDirectory("keyauth-trusted-size")
        defer { scratch.remove() }
        let path = scratch.path + "/large"
        try Data(repeating: 0x41, count: 2 << 20).write(to: URL(fileURLWithPath: path))
        chmod(path, 0o644)
        do {
            _ = try SecureFile.readTrusted(path, label: "--test", limit: 1 << 20)
            Issue.record("a 2 MiB file was read")
        } catch {
            #expect(error.code == .invalidArgument)
            #expect(error.message == "--test: \(path) is larger than 1 MiB")
        }
        #expect(try SecureFile.readTrusted(path, label: "--test", limit: 4 << 20).count == 2 << 20)
    }
}

/// Key files that systemd's `LoadCredential=` hands a service: root's with an ACL for the
/// service's user on systemd 254 and later, so mode 0440; accepted there and nowhere else.
@Suite("Secret files from systemd's credentials directory", .timeLimit(.minutes(10)))
struct CredentialFileTests {
    @Test("owner and mode: root's or the user's, at most 0440, in a directory nobody else writes")
    func rules() {
        let user: uid_t = 990
        func file(owner: uid_t, group: gid_t = 0, _ mode: mode_t) -> Bool {
            SecureFile.isCredentialFile(owner: owner, group: group, mode: S_IFREG | mode, user: user, userGroup: 990)
        }
        #expect(file(owner: 0, 0o440))
        #expect(file(owner: 0, group: 990, 0o440))
        #expect(file(owner: user, group: 4, 0o400))
        // Group read for another group (adm, say): its members could read the key.
        #expect(!file(owner: 0, group: 4, 0o440))
        #expect(!file(owner: 1000, 0o400))
        #expect(!file(owner: 0, 0o444))
        #expect(!file(owner: 0, 0o460))
        #expect(!file(owner: 0, 0o450))
        #expect(SecureFile.isCredentialDirectory(owner: 0, mode: S_IFDIR | 0o550, user: user))
        #expect(SecureFile.isCredentialDirectory(owner: user, mode: S_IFDIR | 0o700, user: user))
        #expect(!SecureFile.isCredentialDirectory(owner: 0, mode: S_IFDIR | 0o570, user: user))
        #expect(!SecureFile.isCredentialDirectory(owner: 1000, mode: S_IFDIR | 0o500, user: user))
        #expect(!SecureFile.isCredentialDirectory(owner: 0, mode: S_IFREG | 0o500, user: user))
    }

    @Test("a 0440 key is read in the credentials directory and refused anywhere else")
    func onlyThere() throws {
        let scratch = TemporaryDirectory("keyauth-credentials")
        defer { scratch.remove() }
        let credentials = scratch.path + "/credentials"
        try FileManager.default.createDirectory(atPath: credentials + "/sub", withIntermediateDirectories: true)
        chmod(credentials, 0o550)
        chmod(credentials + "/sub", 0o700)
        for path in [credentials + "/signing-key", credentials + "/sub/signing-key"] {
            try Data("key".utf8).write(to: URL(fileURLWithPath: path))
            chmod(path, 0o440)
        }
        #expect(
            try SecureFile.readSecret(credentials + "/signing-key", credentialsDirectory: credentials + "/")
                == Array("key".utf8))
        // Outside the directory itself, the strict rule: 0440 is too open.
        for (path, directory) in [
            (credentials + "/sub/signing-key", credentials), (credentials + "/signing-key", nil),
            (credentials + "/signing-key", scratch.path),
        ] {
            #expect(throws: KeyAuthError.self, "\(path) with \(directory ?? "none")") {
                try SecureFile.readSecret(path, credentialsDirectory: directory)
            }
        }
        chmod(credentials + "/signing-key", 0o444)
        let error = #expect(throws: KeyAuthError.self) {
            try SecureFile.readSecret(credentials + "/signing-key", credentialsDirectory: credentials)
        }
        #expect(error?.code == .keyUnprotected)
        chmod(credentials + "/signing-key", 0o440)
        chmod(credentials, 0o770)
        #expect(throws: KeyAuthError.self) {
            try SecureFile.readSecret(credentials + "/signing-key", credentialsDirectory: credentials)
        }
    }
}
