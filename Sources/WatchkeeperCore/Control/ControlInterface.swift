/// The interfaces the control socket serves, as Varlink interface descriptions: clients
/// such as `varlinkctl introspect` and the `varlink` Python module read them with
/// org.varlink.service.GetInterfaceDescription and check calls against them.
public enum ControlInterface {
    public static let name = "io.watchkeeper.Control"
    public static let serviceName = "org.varlink.service"

    public enum Method: String, CaseIterable, Sendable {
        case status = "Status"
        case dump = "Dump"
        case trigger = "Trigger"
        case cancel = "Cancel"
        case reload = "Reload"
        case tasks = "Tasks"
        case watches = "Watches"
        case history = "History"
        case metrics = "Metrics"
        case fleet = "Fleet"
        case next = "Next"

        public var qualified: String { "\(ControlInterface.name).\(rawValue)" }

        /// Changes nothing, so `[daemon] read_group` may call it. Dump is not among them: it
        /// writes the journal and state.json.
        public var readsOnly: Bool {
            switch self {
            case .status, .tasks, .watches, .history, .metrics, .fleet, .next: return true
            case .dump, .trigger, .cancel, .reload: return false
            }
        }
    }

    /// Typed errors of io.watchkeeper.Control, by their unqualified name.
    public enum ErrorName: String, CaseIterable, Sendable {
        case noSuchTask = "NoSuchTask"
        case noSuchName = "NoSuchName"
        case noSuchRun = "NoSuchRun"
        case notStarted = "NotStarted"
        case reloadFailed = "ReloadFailed"
        case notRunning = "NotRunning"
        case permissionDenied = "PermissionDenied"
        case requestTooLarge = "RequestTooLarge"
        case tooManyRequests = "TooManyRequests"
        case invalidMessage = "InvalidMessage"
        case unavailable = "Unavailable"

        public var qualified: String { "\(ControlInterface.name).\(rawValue)" }

        public func error(_ parameters: [DumpField] = []) -> VarlinkError { VarlinkError(qualified, parameters) }
    }

    public static let description = """
        # watchkeeper's control interface: what `watchkeeper status`, `trigger`, `cancel`,
        # `reload`, `dump`, `tasks`, `watches`, `history`, `fleet` and `next` call. See watchkeeper(8).
        interface io.watchkeeper.Control

        # One past run of a task or a watch rule, from the state database.
        type Run (
          run_id: ?string,
          attempt: ?int,
          outcome: string,
          # A task's run: the instant it was due (`watchkeeper next` shows the coming ones).
          scheduled_at: ?string,
          started_at: ?string,
          finished_at: string,
          duration_s: ?float,
          exit_code: ?int,
          signal: ?string,
          expiry: ?string,
          # A fleet task's run: the host the fire ran on (ran_elsewhere: the host that
          # claimed it, whose run ID run_id then is).
          host: ?string,
          # A watch rule's file: its name when that is valid UTF-8, otherwise the name
          # escaped as the journal and the dump's text show it (\\xNN for each byte that
          # is not UTF-8, a backslash doubled), with the exact bytes in path_bytes.
          path: ?string,
          path_bytes: ?[]int
        )

        # The daemon's state, uptime, configuration generation and last reload; running
        # jobs with progress, budget and STATUS= text; next runs; watches with counts and
        # problems. The fields are those of the state dump's sections of the same names.
        # `access` is the caller's own: level ("control": every method; "read": only
        # Status, Tasks, Watches, History, Metrics, Fleet and Next), uid, control_group,
        # read_group and who_may_act.
        method Status() -> (status: object, access: ?object)

        # The SIGUSR1 state dump: as JSON, and as the text the journal shows.
        method Dump() -> (dump: object, text: string)

        # Runs a task now through its usual path: overlap policy, max_jobs, retries and
        # history. Tasks with manual = true run only this way.
        # With fleet = true, a fleet task's run goes through the fleet's claim in etcd, so
        # overlap = "skip" holds across the fleet and every host records it.
        method Trigger(task: string, fleet: ?bool) -> (run_id: string)

        # A waiting run is cancelled; a running one is expired through its on_expire
        # handler with reason "cancelled". `was` is "waiting" or "running".
        method Cancel(run_id: string) -> (was: string)

        # Reloads the configuration, like SIGHUP, and answers once the result is known.
        method Reload() -> (generation: int)

        # The tasks: schedule, next run, overlap, budget, last runs.
        method Tasks() -> (tasks: object)

        # The watch rules: roots, counts, problems, unwatched directories.
        method Watches() -> (watches: object)

        # The last runs of a task or the last files handled by a watch rule, newest first.
        method History(name: string, limit: ?int) -> (kind: string, runs: []Run)

        # The metrics in the Prometheus text format, as metrics_file has them, current.
        method Metrics() -> (text: string)

        # Recent fires of fleet tasks across every host, from etcd, newest first: each
        # with task, instant, host, run_id, state (running or done), outcome, started_at,
        # finished_at and taken_over_from. Unavailable without [cluster] or etcd.
        method Fleet(task: ?string, limit: ?int) -> (fires: []object)

        # The next `count` fires (default 5, at most 1000) of the named tasks, or of every
        # task when none are named, as the scheduler will perform them: each task with name,
        # schedule, zone, notes (jitter, run_on_start, manual, where `every` counts from),
        # and fires, each with local (wall time), weekday, abbreviation, utc_offset, utc
        # (RFC 3339), and mark: null, or kind ("moved": a daylight-saving gap skipped the
        # wall time the schedule names; "repeated": the wall time occurs twice) and text.
        # from: the fires after this instant (seconds since the epoch) instead of now.
        method Next(tasks: ?[]string, count: ?int, from: ?int) -> (tasks: []object)

        # No task of that name is configured.
        error NoSuchTask (task: string)

        # Neither a task nor a watch rule has that name.
        error NoSuchName (name: string)

        # No run with that ID waits or runs (it may have just finished).
        error NoSuchRun (run_id: string)

        # The task was not started: its overlap policy refused a second run.
        error NotStarted (task: string, reason: string)

        # The new configuration was refused; the old one stays in force. `errors` lists
        # the first 20 problems in file order, then "... and N more error(s), not listed".
        error ReloadFailed (generation: int, errors: []string)

        # The daemon is starting or stopping and cannot do this now.
        error NotRunning (state: string)

        # Only root, the daemon's user and members of control_group may connect, and
        # members of read_group only to call the methods that change nothing: `method` is
        # the one refused to such a caller (group is then control_group).
        error PermissionDenied (uid: int, group: ?string, method: ?string)

        # A request was longer than the limit; the connection is closed.
        error RequestTooLarge (limit: int)

        # Too many calls were sent ahead of their replies; the connection is closed.
        error TooManyRequests (limit: int)

        # The message was not a Varlink call (not JSON, or no method).
        error InvalidMessage (reason: string)

        # A part of the daemon did not answer in time.
        error Unavailable (reason: string)

        """

    public static let serviceDescription = """
        # The Varlink service interface, provided by every Varlink service.
        interface org.varlink.service

        # Information about the service and the interfaces it implements.
        method GetInfo() -> (
          vendor: string,
          product: string,
          version: string,
          url: string,
          interfaces: []string
        )

        # The description of an interface this service implements.
        method GetInterfaceDescription(interface: string) -> (description: string)

        # The requested interface was not found.
        error InterfaceNotFound (interface: string)

        # The requested method was not found.
        error MethodNotFound (method: string)

        # The interface defines the requested method, but the service does not implement it.
        error MethodNotImplemented (method: string)

        # One of the passed parameters is invalid.
        error InvalidParameter (parameter: string)

        # The client is denied access.
        error PermissionDenied ()

        # The method is expected to be called with 'more' set to true, but was not.
        error ExpectedMore ()

        """

    /// Answers org.varlink.service calls, which need nothing from the daemon's state.
    static func serviceReply(_ call: VarlinkCall) -> Result<[DumpField], VarlinkError> {
        switch call.methodName {
        case "GetInfo":
            return .success([
                .init("vendor", .string("watchkeeper")),
                .init("product", .string("watchkeeper")),
                .init("version", .string(WatchkeeperVersion.current)),
                .init("url", .string("man:watchkeeper(8)")),
                .init("interfaces", .array([.string(serviceName), .string(name)])),
            ])
        case "GetInterfaceDescription":
            let interface: String
            do {
                interface = try call.parameters.requiredString("interface")
            } catch {
                return .failure(error)
            }
            switch interface {
            case name: return .success([.init("description", .string(description))])
            case serviceName: return .success([.init("description", .string(serviceDescription))])
            default: return .failure(.interfaceNotFound(interface))
            }
        default:
            return .failure(.methodNotFound(call.method))
        }
    }
}
