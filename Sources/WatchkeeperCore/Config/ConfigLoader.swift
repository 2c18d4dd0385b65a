import CWatchkeeperSystem
import Logging
import TOMLKit

#if canImport(Glibc)
import Glibc
#endif

/// Reads and validates a configuration file. Nothing is applied here: a caller gets
/// either a whole valid `Configuration` or every problem the file has, each with its
/// line and column, so one edit-check cycle fixes them all.
public enum ConfigLoader {
    public static let defaultPath = "/etc/watchkeeper/watchkeeper.toml"

    /// `--config` wins, then WATCHKEEPER_CONFIG, then the default.
    public static func resolvePath(explicit: String?, environment: [String: String]) -> String {
        if let explicit, !explicit.isEmpty { return explicit }
        if let fromEnvironment = environment["WATCHKEEPER_CONFIG"], !fromEnvironment.isEmpty { return fromEnvironment }
        return defaultPath
    }

    /// Why a path given as an argument cannot be used, before anything is read. An empty
    /// one is a mistake (`check-config "$CONF"` with CONF unset), not a request for the
    /// default, which is what `resolvePath` makes of it.
    public static func argumentPathProblem(_ argument: String?) -> String? {
        argument?.isEmpty == true ? "the path is empty" : nil
    }

    public static func load(path: String, environment: [String: String]) -> Result<Configuration, ConfigErrors> {
        switch ConfigFileReader.read(path) {
        case .success(let bytes):
            return parse(bytes: bytes, path: path, environment: environment)
        case .failure(let failure):
            return .failure(ConfigErrors([ConfigDiagnostic(file: path, position: nil, message: "unable to read the configuration: \(failure.reason)")]))
        }
    }

    public static func parse(source: String, path: String, environment: [String: String]) -> Result<Configuration, ConfigErrors> {
        parse(bytes: Array(source.utf8), path: path, environment: environment)
    }

    /// The bytes are checked before TOMLKit sees them (see ConfigPreflight): a file that
    /// fails those checks gets only their diagnostics.
    @_spi(Fuzzing) public static func parse(bytes: [UInt8], path: String, environment: [String: String]) -> Result<Configuration, ConfigErrors> {
        let problems = ConfigPreflight.check(bytes)
        guard problems.isEmpty else {
            return .failure(ConfigErrors(problems.map { ConfigDiagnostic(file: path, position: $0.position, message: $0.message) }, limit: .max))
        }
        return parseChecked(source: String(decoding: bytes, as: UTF8.self), path: path, environment: environment)
    }

    private static func parseChecked(source: String, path: String, environment: [String: String]) -> Result<Configuration, ConfigErrors> {
        let root: TOMLTable
        do {
            root = try TOMLTable(string: source)
        } catch let error as TOMLParseError {
            let position = SourcePosition(line: error.source.begin.line, column: error.source.begin.column)
            return .failure(ConfigErrors([ConfigDiagnostic(file: path, position: position, message: "syntax error: \(error.description)")]))
        } catch {
            return .failure(ConfigErrors([ConfigDiagnostic(file: path, position: nil, message: "syntax error: \(error)")]))
        }

        // The parsed toml++ tree is freed with `root` (vendored TOMLKit; upstream's leaked
        // it, ~0.5 KiB per key on every reload): everything read from it is a Swift copy.
        let context = ValidationContext(file: path, sourceMap: TOMLSourceMap(source: source))
        let configuration = read(root, path: path, environment: environment, context: context)
        if context.diagnostics.isEmpty {
            return .success(configuration)
        }
        return .failure(ConfigErrors(context.diagnostics, total: context.found))
    }

    /// Every key the parser accepts, by table: "" for the top level, then "daemon", "task",
    /// "watch", "task.retry" and "watch.retry". The readers are the only list there is (each
    /// key becomes known when its reader asks for it), so this runs them on a file that has
    /// every table and collects what each one asked for; documentation tests compare it
    /// with watchkeeper.toml(5) and docs/configuration.md.
    public static func acceptedKeys() -> [String: [String]] {
        let probe = """
            [daemon]
            [cluster]
            [[task]]
            name = "t"
            retry = {}
            [[watch]]
            name = "w"
            retry = {}
            """
        let root: TOMLTable
        do {
            root = try TOMLTable(string: probe)
        } catch {
            preconditionFailure("the key probe is not valid TOML: \(error)")
        }
        let context = ValidationContext(file: "", sourceMap: TOMLSourceMap(source: probe), collectingKeys: true)
        _ = read(root, path: "", environment: [:], context: context)
        return context.keysReadByTable
    }

    /// Reads every table of a parsed file, reporting each problem to `context`; the result
    /// is only valid when `context` has no diagnostics.
    private static func read(_ root: TOMLTable, path: String, environment: [String: String], context: ValidationContext) -> Configuration {
        var daemon = DaemonSettings(environment: environment)
        var top = TableReader(table: root, path: [], displayName: "the top level", context: context)

        if let daemonTable = top.table("daemon") {
            var reader = TableReader(table: daemonTable, path: [.key("daemon")], displayName: "[daemon]", context: context)
            readDaemon(&reader, into: &daemon)
            reader.reportUnknownKeys()
        }
        var cluster: ClusterSettings?
        if let clusterTable = top.table("cluster") {
            var reader = TableReader(table: clusterTable, path: [.key("cluster")], displayName: "[cluster]", context: context)
            cluster = ClusterSettings.read(&reader)
            reader.reportUnknownKeys()
        }
        var tasks: [TaskSettings] = []
        if let entries = top.arrayOfTables(NamedEntryKind.task.rawValue) {
            var declared: [String: [TOMLPathComponent]] = [:]
            for (name, reader) in namedEntries(entries, kind: .task, context: context) {
                var reader = reader
                declared[name] = reader.path
                if let task = TaskSettings.read(name: name, from: &reader) { tasks.append(task) }
                reader.reportUnknownKeys()
            }
            TaskSettings.validateDependencies(tasks, declared: declared, context: context)
            TaskSettings.validateFleet(tasks, cluster: cluster, declared: declared, context: context)
        }
        var watches: [WatchSettings] = []
        if let entries = top.arrayOfTables(NamedEntryKind.watch.rawValue) {
            for (name, reader) in namedEntries(entries, kind: .watch, context: context) {
                var reader = reader
                if let watch = WatchSettings.read(name: name, from: &reader) {
                    if watch.fleet == .one {
                        if cluster == nil {
                            context.error(at: reader.valuePosition("fleet"), "watch \"\(name)\": fleet = \"one\" needs a [cluster] section: the etcd cluster the hosts decide through")
                        }
                        if watch.batch {
                            context.error(at: reader.valuePosition("fleet"), "watch \"\(name)\": fleet = \"one\" claims each file for its own job; it is not available with batch")
                        }
                    }
                    watches.append(watch)
                }
                reader.reportUnknownKeys()
            }
        }
        top.reportUnknownKeys()
        return Configuration(path: path, daemon: daemon, tasks: tasks, watches: watches, cluster: cluster)
    }

    static func readDaemon(_ reader: inout TableReader, into daemon: inout DaemonSettings) {
        if let level = reader.oneOf("log_level", allowed: Logger.Level.allCases.map(\.rawValue)) {
            daemon.logLevel = Logger.Level(rawValue: level) ?? .info
        }
        if let grace = reader.duration("shutdown_grace", range: .zero ... .seconds(86_400)) {
            daemon.shutdownGrace = grace
        }
        if let directory = reader.absolutePath("runtime_dir") {
            // The control socket lives there, and a Unix socket's path has a fixed size.
            let socket = DaemonSettings.controlSocketPath(runtimeDirectory: directory)
            if socket.utf8.count > Int(WK_SUN_PATH_MAX) {
                reader.context.error(at: reader.valuePosition("runtime_dir"),
                                     "\(reader.dotted("runtime_dir")) = \"\(directory)\" is too long: the control socket \(socket) would be \(socket.utf8.count) bytes, and a Unix socket's path holds at most \(WK_SUN_PATH_MAX); choose a shorter directory")
            }
            daemon.runtimeDirectory = directory
        }
        if let directory = reader.absolutePath("state_dir") {
            daemon.stateDirectory = directory
        }
        if let limit = reader.duration("dump_component_timeout", range: .milliseconds(10) ... .seconds(60)) {
            daemon.dumpComponentTimeout = limit
        }
        if let count = reader.integer("recent_problems", range: 1 ... 10_000) {
            daemon.recentProblems = count
        }
        if let limit = reader.integer("max_jobs", range: 1 ... 1_024) {
            daemon.maxJobs = limit
        }
        if let group = reader.string("control_group") {
            if AccountNames.groupID(named: group) == nil {
                reader.context.error(at: reader.valuePosition("control_group"),
                                     "\(reader.dotted("control_group")) = \"\(group)\": no such group (create it with groupadd, or leave control_group out to allow only root and the daemon's user)")
            }
            daemon.controlGroup = group
        }
        if let group = reader.string("read_group") {
            if AccountNames.groupID(named: group) == nil {
                reader.context.error(at: reader.valuePosition("read_group"),
                                     "\(reader.dotted("read_group")) = \"\(group)\": no such group (create it with groupadd, or leave read_group out to let no one read without control access)")
            }
            daemon.readGroup = group
        }
        // node_exporter's textfile collector reads only *.prom files: any other name would
        // be written and never exported, with nothing to say why.
        if let file = reader.absolutePath("metrics_file") {
            let directory = String(file[..<(file.lastIndex(of: "/") ?? file.startIndex)])
            var info = stat()
            if !(file.hasSuffix(".prom") && file.count > "/.prom".count) {
                reader.context.error(at: reader.valuePosition("metrics_file"),
                                     "\(reader.dotted("metrics_file")) = \"\(file)\" must name a *.prom file: node_exporter's textfile collector reads no other")
            } else if stat(directory.isEmpty ? "/" : directory, &info) != 0 || info.st_mode & S_IFMT != S_IFDIR {
                reader.context.error(at: reader.valuePosition("metrics_file"),
                                     "\(reader.dotted("metrics_file")) = \"\(file)\": the directory \(directory) does not exist (node_exporter's --collector.textfile.directory; create it, or point metrics_file there)")
            } else {
                daemon.metricsFile = file
            }
        }
        if let interval = reader.duration("metrics_interval", range: .seconds(1) ... .seconds(3_600)) {
            daemon.metricsInterval = interval
        }
    }
}

/// The arrays of named tables; names are unique within each kind.
enum NamedEntryKind: String, CaseIterable {
    case watch
    case task
}

/// Checks every entry's `name` (present, well-formed, unique within its kind) and
/// returns the entries that have one, each with a reader that already knows `name`.
func namedEntries(_ entries: [(TOMLTable, Int)], kind: NamedEntryKind, context: ValidationContext) -> [(String, TableReader)] {
    var firstSeen: [String: SourcePosition?] = [:]
    var result: [(String, TableReader)] = []
    for (table, index) in entries {
        let path: [TOMLPathComponent] = [.key(kind.rawValue), .index(index)]
        var reader = TableReader(table: table, path: path, displayName: "[[\(kind.rawValue)]]", context: context)
        guard let name = reader.string("name", required: true) else { continue }
        let namePosition = context.sourceMap.valuePosition(path + [.key("name")])
        if !isValidEntryName(name) {
            context.error(at: namePosition, "invalid \(kind.rawValue) name \"\(name)\": use letters, digits, '.', '_' and '-', starting with a letter or digit")
            continue
        } else if let earlier = firstSeen[name] {
            let whereEarlier = earlier.map { " (first defined at line \($0.line))" } ?? ""
            context.error(at: namePosition, "duplicate \(kind.rawValue) name \"\(name)\"\(whereEarlier)")
            continue
        }
        firstSeen[name] = namePosition
        result.append((name, TableReader(table: table, path: path, displayName: "[[\(kind.rawValue)]] \"\(name)\"", context: context, knownKeys: ["name"])))
    }
    return result
}

func isValidEntryName(_ name: String) -> Bool {
    guard let first = name.unicodeScalars.first, first.isASCII, first.properties.isAlphabetic || ("0"..."9").contains(first) else {
        return false
    }
    return name.count <= 64 && name.unicodeScalars.allSatisfy { scalar in
        scalar.isASCII && (scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || scalar == "." || scalar == "_" || scalar == "-")
    }
}
