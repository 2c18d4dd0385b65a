import Dispatch

/// The control socket's calls, each answered by the owner of what it asks about, on that
/// owner's queue: the lifecycle for reloads, the jobs queue for trigger and cancel, the
/// state store for history (asked through the jobs or watching queue, after the runs they
/// recorded), the dump for everything shown.
extension LifecycleOwner: ControlBackend {
    public func handle(_ method: ControlInterface.Method, parameters: DumpValue, peer: ControlPeer, reply: @escaping ControlReply) {
        do throws(VarlinkError) {
            switch method {
            case .status:
                stateDump.snapshot(sections: ["daemon", "watchdog", "jobs", "tasks", "watches", "control", "cluster"]) { status in
                    reply(.success([.init("status", status)]))
                }
            case .dump:
                stateDump.requestDump(reason: "watchkeeper dump") { document, text in
                    reply(.success([.init("dump", document), .init("text", .string(text))]))
                }
            case .tasks:
                stateDump.snapshot(sections: ["tasks"]) { value in
                    reply(Self.section("tasks", of: value).map { [.init("tasks", $0)] })
                }
            case .watches:
                stateDump.snapshot(sections: ["watches"]) { value in
                    reply(Self.section("watches", of: value).map { [.init("watches", $0)] })
                }
            case .trigger:
                let task = try parameters.requiredString("task")
                let fleet = parameters["fleet"] == .bool(true)
                whileRunning(reply) { self.trigger(task, fleet: fleet, reply: reply) }
            case .cancel:
                let text = try parameters.requiredString("run_id")
                guard let runID = RunID(text) else { throw VarlinkError.invalidParameter("run_id") }
                queues.jobs.async { reply(self.cancel(runID)) }
            case .reload:
                whileRunning(reply) { self.reloadForControl(reply) }
            case .metrics:
                metrics.render { text in reply(.success([.init("text", .string(text))])) }
            case .fleet:
                let task = parameters["task"]?.stringValue
                let limit = Int(try parameters.optionalInt("limit", in: 1 ... 10_000) ?? 20)
                guard let cluster else {
                    throw ControlInterface.ErrorName.unavailable.error([.init("reason", .string("no [cluster] is configured: this host runs no fleet tasks"))])
                }
                cluster.recentFires(task: task, limit: limit) { result in
                    switch result {
                    case .success(let fires): reply(.success([.init("fires", .array(fires.map(\.dumpValue)))]))
                    case .failure(let error):
                        reply(.failure(ControlInterface.ErrorName.unavailable.error([.init("reason", .string("unable to read the fleet's fires: \(error)"))])))
                    }
                }
            case .next:
                var names: [String] = []
                if let value = parameters["tasks"], value != .null {
                    guard let list = value.arrayValue else { throw VarlinkError.invalidParameter("tasks") }
                    for element in list {
                        guard let name = element.stringValue else { throw VarlinkError.invalidParameter("tasks") }
                        names.append(name)
                    }
                }
                let count = Int(try parameters.optionalInt("count", in: 1 ... Int64(FirePreview.maximumCount)) ?? Int64(FirePreview.defaultCount))
                let tasks = names
                // `next --from`: seconds since the epoch, up to 2200 (CalendarEvent's last year).
                let from = try parameters.optionalInt("from", in: 0 ... 7_258_118_400).map { WallTime(secondsSinceEpoch: $0, nanoseconds: 0) }
                queues.jobs.async { self.next(tasks, count: count, from: from, reply: reply) }
            case .history:
                let name = try parameters.requiredString("name")
                let limit = Int(try parameters.optionalInt("limit", in: 1 ... 10_000) ?? 10)
                queues.lifecycle.async { self.history(name, limit: limit, reply: reply) }
            }
        } catch {
            reply(.failure(error))
        }
    }

    private static func section(_ name: String, of value: DumpValue) -> Result<DumpValue, VarlinkError> {
        guard let section = value[name], section["stuck"] == nil else {
            return .failure(ControlInterface.ErrorName.unavailable.error([.init("reason", .string("the \(name) subsystem did not answer in time"))]))
        }
        return .success(section)
    }

    /// Starting and stopping daemons neither start work nor reload.
    private func whileRunning(_ reply: @escaping ControlReply, _ body: @escaping @Sendable () -> Void) {
        queues.lifecycle.async {
            guard case .running = self.machine.state else {
                reply(.failure(ControlInterface.ErrorName.notRunning.error([.init("state", .string(self.machine.state.description))])))
                return
            }
            body()
        }
    }

    private func trigger(_ task: String, fleet: Bool, reply: @escaping ControlReply) {
        queues.jobs.async {
            switch self.scheduler.trigger(task: task, fleet: fleet) {
            case .success(let runID):
                reply(.success([.init("run_id", .string(runID))]))
            case .failure(.unknownTask(let name)):
                reply(.failure(ControlInterface.ErrorName.noSuchTask.error([.init("task", .string(name))])))
            case .failure(let error):
                reply(.failure(ControlInterface.ErrorName.notStarted.error([.init("task", .string(task)), .init("reason", .string(error.description))])))
            }
        }
    }

    /// Waiting (for a slot, a retry or its dependencies): cancelled with a record. Running:
    /// expired like a budget overrun, so its on_expire handler runs, reason "cancelled".
    /// Both checks run on the jobs queue, where a job's own end is decided, so the answer
    /// cannot race it: a run that ended first is simply not found.
    private func cancel(_ runID: RunID) -> Result<[DumpField], VarlinkError> {
        dispatchPrecondition(condition: .onQueue(queues.jobs.queue))
        if scheduler.cancel(runID: runID.description) { return .success([.init("was", .string("waiting"))]) }
        if engine.expire(runID: runID, reason: .cancelled) { return .success([.init("was", .string("running"))]) }
        return .failure(ControlInterface.ErrorName.noSuchRun.error([.init("run_id", .string(runID.description))]))
    }

    /// The starts are copied on the jobs queue; the walk (up to 1000 fires a task) runs on
    /// the config queue, which no one waits on, so it holds up neither the scheduler nor
    /// the watchdog.
    private func next(_ names: [String], count: Int, from: WallTime?, reply: @escaping ControlReply) {
        dispatchPrecondition(condition: .onQueue(queues.jobs.queue))
        switch scheduler.previewStarts(names, from: from) {
        case .success(let starts):
            queues.config.async {
                reply(.success([.init("tasks", .array(starts.map { FirePreview.preview($0, count: count).dumpValue }))]))
            }
        case .failure(let error):
            guard case .unknownTask(let name) = error else { return reply(.failure(.invalidParameter("tasks"))) }
            reply(.failure(ControlInterface.ErrorName.noSuchTask.error([.init("task", .string(name))])))
        }
    }

    private func history(_ name: String, limit: Int, reply: @escaping ControlReply) {
        dispatchPrecondition(condition: .onQueue(queues.lifecycle.queue))
        if configuration.tasks.contains(where: { $0.name == name }) {
            queues.jobs.async {
                self.scheduler.history(task: name, limit: limit) { result in
                    reply(result.map { [.init("kind", .string("task")), .init("runs", .array($0))] })
                }
            }
        } else if configuration.watches.contains(where: { $0.name == name }) {
            queues.watching.async {
                self.watcher.history(rule: name, limit: limit) { result in
                    reply(result.map { [.init("kind", .string("watch")), .init("runs", .array($0))] })
                }
            }
        } else {
            reply(.failure(ControlInterface.ErrorName.noSuchName.error([.init("name", .string(name))])))
        }
    }
}
