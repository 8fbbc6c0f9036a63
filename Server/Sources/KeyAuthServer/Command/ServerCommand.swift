import Dispatch
import Glibc
import KeyAuth
import KeyAuthArguments

/// The `keyauth-server` command line (PROTOCOL.md section 7), as a library so that it is testable
/// with injected arguments, environment and output: parsing (`ServerCommand+Parsing.swift`),
/// help, the admin commands (`+Admin`) and `serve` (`+Serve`) each in a file of their own.
///
/// Flags override `KEYAUTH_SERVER_*` environment variables, which override the settings file
/// (``ServerSettings``), which overrides defaults.
package enum ServerCommand {
    /// Exit statuses, from `sysexits.h` like the `keyauth` command.
    package enum ExitStatus {
        /// Success.
        package static let success: Int32 = 0
        /// Anything else.
        package static let failure: Int32 = 1
        /// Bad arguments or configuration.
        package static let usage: Int32 = 64
        /// A file that holds the server's secrets is exposed or unusable: a database or signing
        /// key file other users can read or that belongs to another user, or a signing key that
        /// is missing or not a usable RSA key (EX_DATAERR, as `keyauth` for key files).
        package static let dataError: Int32 = 65
        /// Storage or the listening address unavailable.
        package static let unavailable: Int32 = 69
        /// The settings file cannot be read, or one of its lines is wrong (EX_CONFIG): the
        /// message names the file and line. Distinct from 64 so that a unit's restart policy and
        /// an operator can tell an edited file from a mistyped command.
        package static let configuration: Int32 = 78
    }

    /// The settings file read when it exists and neither `--config` nor `KEYAUTH_SERVER_CONFIG`
    /// names one: where the package installs it.
    package static let defaultSettingsFile = "/etc/keyauth/server.conf"

    /// What the arguments ask for.
    package enum Action: Sendable {
        /// Run the server.
        case serve(ServerConfiguration)
        /// Print the configuration `serve` would run with, and where each value came from
        /// (labels by setting name), after validating it.
        case checkConfig(ServerConfiguration, origins: [String: String], settingsFile: String?)
        /// Print a one-time enrollment code for a user.
        case enroll(user: String, database: String)
        /// List devices, all or the chosen ones.
        case devices(DeviceFilter, database: String)
        /// Approve a pending device (a key ID or a prefix of it).
        case approve(kid: String, database: String)
        /// List users with their device counts, as JSON with `--json`.
        case users(json: Bool, database: String)
        /// Revoke every device of a user and delete their data.
        case deleteUser(user: String, database: String)
        /// List the enrollment codes still usable.
        case listCodes(json: Bool, database: String)
        /// Delete a user's unused enrollment codes.
        case revokeCodes(user: String, database: String)
        /// Copy a SQLite database into a new file.
        case backup(destination: String, database: String)
        /// Revoke (or deny, when pending) a device.
        case revoke(kid: String, database: String)
        /// List or rotate the server's signing keys.
        case keys(KeysAction, KeysOptions)
        /// Add, list or remove client applications of sign-in by approval.
        case clients(ClientsAction, database: String)
        /// Make the SSH user CA's key file, or print its `TrustedUserCAKeys` line.
        case sshCA(SSHCAAction, keyFile: String)
        /// Print the audit trail from a start (all of it when nil), as JSON with `--json`.
        case audit(since: AuditStart?, json: Bool, database: String)
        /// Print the help text: the whole of it, or one command's page (`devices --help`,
        /// `help devices`).
        case help(topic: String?)
        /// Print the version, the same as `keyauth --version`'s.
        case version
    }

    /// What `keyauth-server keys` does.
    package enum KeysAction: Sendable, Equatable {
        /// `keys list [--json]`: every key with its state and dates.
        case list(json: Bool = false)
        /// `keys rotate`: a new key of `algorithm` (nil: `KEYAUTH_SERVER_TOKEN_ALG`, else the
        /// current key's) that signs after `delay` seconds; an RSA key of `rsaBits` (nil:
        /// `--signing-key-bits` was not set, so the size of the newest RSA key, else 2048).
        case rotate(algorithm: JWSAlgorithm?, delay: Int64, rsaBits: Int? = nil)
    }

    /// The settings `keyauth-server keys` shares with `serve`.
    package struct KeysOptions: Sendable, Equatable {
        /// `--db`.
        package var database: String
        /// `--token-lifetime`: when previous keys retire.
        package var tokenLifetime: Int64 = 900
        /// `--signing-key-file`: the server signs with a file's key, which does not rotate.
        package var signingKeyFile: String?

        /// Options for `database` with the defaults.
        package init(database: String) {
            self.database = database
        }
    }

    /// What `keyauth-server ssh-ca` does.
    package enum SSHCAAction: Sendable, Equatable {
        /// `ssh-ca init [--alg ed25519|ecdsa|rsa]`: a new CA key file, its line printed.
        case initialize(keyType: String)
        /// `ssh-ca show`: the CA's public key line.
        case show
        /// `ssh-ca krl FILE`: the revocation list of revoked devices' certificates, to FILE; with
        /// `--ssh-principals-file`, of the certificates naming principals it no longer grants too.
        case revocationList(file: String, database: String, principalsFile: String?)
        /// `ssh-ca rotate [--alg ed25519|ecdsa|rsa] [--overlap DURATION]`: a new CA key in the
        /// file, the old one published beside it for `overlap` seconds; the published lines
        /// printed, and a warning when `overlap` is shorter than the servers'
        /// `certificateLifetime` and `cleanupInterval` together (`--ssh-certificate-lifetime`
        /// and `--cleanup-interval`, as `serve` reads them): servers sign with the old CA until
        /// their next cleanup.
        case rotate(keyType: String?, overlap: Int64, certificateLifetime: Int64, cleanupInterval: Int64)
        /// `ssh-ca retire`: the previous CA no longer published, and revoked.
        case retire
    }

    /// What `keyauth-server clients` does.
    package enum ClientsAction: Sendable, Equatable {
        /// `clients add NAME [--redirect-uri URI...] [--post-logout-redirect-uri URI...]
        /// [--public]`: prints the new client's id and (unless public) its secret once.
        case add(
            name: String, redirectURIs: [String] = [], postLogoutRedirectURIs: [String] = [], isPublic: Bool = false,
            kind: ClientKind = .application, allowedUsers: [String] = [])
        /// `clients list [--json]`.
        case list(json: Bool = false)
        /// `clients remove ID`.
        case remove(id: String)
    }

    /// Where a command writes: standard output and standard error, one string at a time.
    package struct Output: Sendable {
        /// Writes to standard output.
        package var standard: @Sendable (String) -> Void
        /// Writes to standard error.
        package var error: @Sendable (String) -> Void

        /// Creates an output.
        package init(standard: @escaping @Sendable (String) -> Void, error: @escaping @Sendable (String) -> Void) {
            self.standard = standard
            self.error = error
        }

        /// The process's standard output and standard error.
        package static let process = Output(
            standard: { DescriptorIO.writeAll(STDOUT_FILENO, $0) }, error: { DescriptorIO.writeAll(STDERR_FILENO, $0) })
    }

    /// Runs the command and returns the exit status. `serve` blocks until SIGTERM, SIGINT or SIGHUP.
    ///
    /// Every verb first sets the umask to 077, so that whatever it creates (the SQLite database,
    /// its `-wal` and `-shm` files) is private to the server's user from the first byte.
    package static func main(
        arguments: [String], environment: [String: String], output: Output = .process,
        log: any ServerLog = StandardErrorLog()
    ) -> Int32 {
        umask(0o077)
        let action: Action
        do {
            action = try parse(arguments: arguments, environment: environment)
        } catch {
            output.error("keyauth-server: \(error.message)\n")
            return error.status
        }
        switch action {
        case .help(let topic):
            output.standard(topic.map(helpPage(for:)) ?? helpText)
            return ExitStatus.success
        case .version:
            output.standard("keyauth-server \(KeyAuthClient.version)\n")
            return ExitStatus.success
        case .serve(let configuration):
            return serve(configuration, output: output, log: log)
        case .checkConfig(let configuration, let origins, let settingsFile):
            output.standard(checkConfigReport(configuration, origins: origins, settingsFile: settingsFile))
            return ExitStatus.success
        case .enroll(let user, let database):
            return enroll(user: user, database: database, output: output)
        case .devices(let filter, let database):
            return listDevices(filter, database: database, output: output)
        case .approve(let kid, let database):
            return approve(kid: kid, database: database, output: output)
        case .users(let json, let database):
            return listUsers(json: json, database: database, output: output)
        case .deleteUser(let user, let database):
            return deleteUser(user, database: database, output: output)
        case .listCodes(let json, let database):
            return listCodes(json: json, database: database, output: output)
        case .revokeCodes(let user, let database):
            return revokeCodes(user: user, database: database, output: output)
        case .backup(let destination, let database):
            return backup(database: database, to: destination, output: output)
        case .revoke(let kid, let database):
            return revoke(kid: kid, database: database, output: output)
        case .keys(let action, let options):
            return keys(action, options: options, output: output)
        case .clients(let action, let database):
            return clients(action, database: database, output: output)
        case .sshCA(let action, let keyFile):
            return sshCA(action, keyFile: keyFile, output: output)
        case .audit(let since, let json, let database):
            return audit(since: since, json: json, database: database, output: output)
        }
    }

    /// The exit status for a storage failure at start: 64 for a kind of storage this build
    /// lacks, 65 for an exposed database file, 69 for anything else (unreachable, missing).
    static func exitStatus(for error: StorageError) -> Int32 {
        switch error.code {
        case .unsupported, .invalidLocation: ExitStatus.usage
        case .unprotected, .notKeyAuthDatabase: ExitStatus.dataError
        default: ExitStatus.unavailable
        }
    }

    /// The process environment as a dictionary.
    package static func processEnvironment() -> [String: String] {
        var result: [String: String] = [:]
        var pointer = environ
        while let entry = pointer.pointee {
            let text = String(cString: entry)
            if let equals = text.firstIndex(of: "=") {
                result[String(text[..<equals])] = String(text[text.index(after: equals)...])
            }
            pointer += 1
        }
        return result
    }
}
