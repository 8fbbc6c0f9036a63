extension ServerCommand {
    /// The report of `keyauth-server check-config`: every serve setting as `key = value`, the
    /// effective value with defaults filled in, and where it came from, in the order of `--help`.
    ///
    /// The password of a PostgreSQL URL is masked, so the report can be pasted into a ticket.
    static func checkConfigReport(
        _ configuration: ServerConfiguration, origins: [String: String], settingsFile: String?
    ) -> String {
        let rows = configuration.settingValues
        let width = rows.map { $0.key.count + 3 + $0.value.count }.max() ?? 0
        var lines = [
            "# keyauth-server check-config: the configuration is valid",
            "# settings file: \(settingsFile ?? "none")",
        ]
        // Valid, but what serve would warn about at start is said here too.
        for warning in configuration.startWarnings(credentialsDirectory: ServeFiles.credentialsDirectory) {
            lines.append("# " + warning)
        }
        for (key, value) in rows {
            let setting = value.isEmpty ? "#\(key) =" : "\(key) = \(value)"
            let padding = String(repeating: " ", count: max(1, width + 2 - setting.count))
            lines.append(setting + padding + "# " + (origins[key] ?? (value.isEmpty ? "not set" : "default")))
        }
        return lines.joined(separator: "\n") + "\n"
    }
}

extension ServerConfiguration {
    /// Every serve setting by its flag's name (without dashes) and its effective value as a
    /// flag would write it, from the parser's own table (``ServerCommand/serveSettings``); empty
    /// for a setting that is not set and has no default value.
    ///
    /// - Warning: the database is shown with its password masked: this is for display only.
    var settingValues: [(key: String, value: String)] {
        ServerCommand.serveSettings.map { ($0.key, $0.show(self)) }
    }
}
