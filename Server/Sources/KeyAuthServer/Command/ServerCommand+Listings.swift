import KeyAuth

/// The listings of the admin commands (`devices`, `users`, `codes list`, `keys list`,
/// `clients list`, `audit`): one aligned table style for people (``TextTable``), and with
/// `--json` one JSON array of objects for scripts, the same rows in the same order.
extension ServerCommand {
    /// A listing being built: each row a table row for people and a JSON object for scripts,
    /// both derived from the same cells so that they cannot disagree.
    struct Listing {
        /// One cell: how the table shows it and what JSON value it is.
        enum Cell {
            /// Text as stored (`-` in the table when empty).
            case text(String)
            /// Text that may be absent: `-` in the table, `null` in JSON.
            case optional(String?)
            /// A time: RFC 3339, or `-` and `null` when there is none.
            case time(Int64?)
            /// A count: a JSON number.
            case count(Int)
            /// Several values: comma-separated in the table, a JSON array.
            case list([String])

            var text: String {
                switch self {
                case .text(let text): text
                case .optional(let text): text ?? ""
                case .time(let seconds): seconds.map(RFC3339.string(fromSeconds:)) ?? ""
                case .count(let count): String(count)
                case .list(let values): values.joined(separator: ",")
                }
            }

            var json: JSONValue {
                switch self {
                case .text(let text): .string(text)
                case .optional(let text): text.map(JSONValue.string) ?? .null
                case .time(let seconds): seconds.map { .string(RFC3339.string(fromSeconds: $0)) } ?? .null
                case .count(let count): .integer(Int64(count))
                case .list(let values): .array(values.map(JSONValue.string))
                }
            }
        }

        private var table: TextTable
        private var objects: [JSONValue] = []
        /// The JSON members, in the columns' order.
        private let keys: [String]

        /// A listing of `columns`: each a table header and the JSON member of its cells.
        init(_ columns: [(header: String, key: String)]) {
            table = TextTable(header: columns.map(\.header))
            keys = columns.map(\.key)
        }

        /// Adds one row, its cells in the columns' order.
        mutating func append(_ cells: [Cell]) {
            table.rows.append(cells.map(\.text))
            objects.append(.object(Dictionary(uniqueKeysWithValues: zip(keys, cells.map(\.json)))))
        }

        /// Writes the table, or with `json` the array (members in the columns' order), on
        /// standard output.
        func write(json: Bool, to output: Output) {
            output.standard(json ? JSONValue.array(objects).serialized(leadingKeys: keys) + "\n" : table.rendered)
        }
    }

    /// `users [--json]`: every user with a device record, with device counts by state and the
    /// last login.
    static func listUsers(json: Bool, database: String, output: Output) -> Int32 {
        withStorage(database, output: output) { storage in
            let states: [DeviceStatus] = [.active, .pending, .expired, .denied, .revoked]
            var listing = Listing(
                [("USER", "user")] + states.map { ($0.rawValue.uppercased(), $0.rawValue) }
                    + [("LAST_LOGIN", "last_login_at")])
            for summary in try DeviceRegistry.administering(storage).users() {
                listing.append(
                    [.text(summary.user)] + states.map { .count(summary.counts[$0] ?? 0) }
                        + [.time(summary.lastLoginAt)])
            }
            listing.write(json: json, to: output)
        }
    }

    /// `keys list [--json]`: the signing keys with their states and dates.
    static func listKeys(_ rotation: SigningKeyRotation, json: Bool, output: Output) throws {
        var listing = Listing([
            ("KID", "kid"), ("ALG", "alg"), ("STATE", "state"), ("CREATED", "created_at"), ("SIGNS_FROM", "signs_from"),
            ("RETIRES", "retires_at"),
        ])
        for key in try rotation.list() {
            listing.append([
                .text(key.kid), .text(key.algorithm.rawValue),
                .text(key.signsIDTokens ? "id-tokens" : Self.stateName(key.state)), .time(key.createdAt),
                .time(key.activeFrom), .time(key.retiresAt),
            ])
        }
        listing.write(json: json, to: output)
    }

    /// `clients list [--json]`: the client applications, the name last (it may hold spaces),
    /// several redirect URIs separated by commas.
    static func listClients(_ registry: ClientRegistry, json: Bool, output: Output) throws {
        var listing = Listing([
            ("CLIENT_ID", "client_id"), ("CREATED", "created_at"), ("TYPE", "type"), ("REDIRECT_URIS", "redirect_uris"),
            ("POST_LOGOUT_REDIRECT_URIS", "post_logout_redirect_uris"), ("ALLOWED_USERS", "allowed_users"),
            ("NAME", "name"),
        ])
        for client in try registry.list() {
            let type = client.kind == .host ? "host" : client.isPublic ? "public" : "confidential"
            listing.append([
                .text(client.id), .time(client.createdAt), .text(type), .list(client.redirectURIs),
                .list(client.postLogoutRedirectURIs), .list(client.allowedUsers), .text(client.name),
            ])
        }
        listing.write(json: json, to: output)
    }

    /// The state column of `keys list`.
    private static func stateName(_ state: SigningKeySchedule.State) -> String {
        switch state {
        case .next: "next"
        case .current: "current"
        case .previous: "previous"
        case .retired: "retired"
        }
    }
}
