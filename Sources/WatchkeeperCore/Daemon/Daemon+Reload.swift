import CWatchkeeperSystem
import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Reloading: SIGHUP, `systemctl reload` and `watchkeeper reload` all come here, on the
/// lifecycle queue; the file is read and checked on the config queue.
extension Daemon {
    /// The configuration is read and checked on a queue of its own, so a huge or hostile
    /// file delays only the reload: SIGTERM, the dump and the watchdog's probes of the
    /// lifecycle queue are answered meanwhile. A SIGHUP during a reload asks for one more.
    func reload() {
        guard !reloadInProgress else {
            reloadAgain = true
            return
        }
        reloadInProgress = true
        let monotonic = MonotonicClock.nowMicroseconds()
        notifier.send([("RELOADING", "1"), ("MONOTONIC_USEC", String(monotonic)), ("STATUS", "reloading \(configuration.path)")])
        let at = WallTime.now()
        let path = configuration.path
        let environment = options.environment
        configQueue.async {
            // A reload also picks up a tzdata update for cron schedules.
            TimeZoneRules.discardCachedZones()
            let result = ConfigLoader.load(path: path, environment: environment)
            // A refused file may have cost a lot of memory to parse: give it back.
            _ = malloc_trim(0)
            self.lifecycleQueue.async { self.finishReload(result, at: at) }
        }
    }

    /// `watchkeeper reload`: a reload like SIGHUP's, answered once its result is known.
    func reloadForControl(_ reply: @escaping ControlReply) {
        dispatchPrecondition(condition: .onQueue(lifecycleQueue.queue))
        if reloadInProgress { nextReloadWaiters.append(reply) } else { reloadWaiters.append(reply) }
        perform(machine.handle(.reloadRequested))
    }

    /// The daemon is stopping: those waiting for this reload and those waiting for the next
    /// one get NotRunning (exit 75), not a connection closed under them.
    func refuseReloadWaiters() {
        let stopping = ControlInterface.ErrorName.notRunning.error([.init("state", .string(machine.state.description))])
        answerReloadWaiters(.failure(stopping))
        answerReloadWaiters(.failure(stopping))
    }

    private func answerReloadWaiters(_ answer: Result<[DumpField], VarlinkError>) {
        let waiters = reloadWaiters
        reloadWaiters = nextReloadWaiters
        nextReloadWaiters = []
        for reply in waiters { reply(answer) }
    }

    private func finishReload(_ result: Result<Configuration, ConfigErrors>, at: WallTime) {
        reloadInProgress = false
        guard case .running = machine.state else {
            logger.notice("a reload finished while stopping; its result is not applied")
            refuseReloadWaiters()
            return
        }
        var result = result
        if case .success(let loaded) = result, loaded.daemon.stateDirectory != configuration.daemon.stateDirectory {
            // The task history, the file ledger and the lock live there: moving them under
            // running work would split them. Refused whole, so nothing half-applies.
            result = .failure(ConfigErrors([ConfigDiagnostic(file: loaded.path, position: nil, message:
                "state_dir cannot change on reload (from \(configuration.daemon.stateDirectory) to \(loaded.daemon.stateDirectory)): restart watchkeeper to use the new state directory")]))
        }
        switch result {
        case .success(let loaded):
            apply(loaded)
            generation += 1
            loadedAt = at
            lastReload = (at, nil)
            logger.notice("reloaded \(loaded.path): configuration generation \(generation) in force",
                          metadata: [JournalFields.messageIDKey: .string(MessageID.reloadSucceeded.rawValue), "generation": .stringConvertible(generation)])
            answerReloadWaiters(.success([.init("generation", .int(generation))]))
        case .failure(let errors):
            lastReload = (at, errors)
            for line in errors.lines {
                logger.error("\(line)", metadata: [JournalFields.messageIDKey: .string(MessageID.configInvalid.rawValue)])
            }
            logger.error("unable to reload \(configuration.path): \(errors.total) error(s); configuration generation \(generation) stays in force",
                         metadata: [JournalFields.messageIDKey: .string(MessageID.reloadFailed.rawValue), "errors": .string(errors.description)])
            answerReloadWaiters(.failure(ControlInterface.ErrorName.reloadFailed.error([
                .init("generation", .int(generation)), .init("errors", .array(errors.lines.map { .string($0) })),
            ])))
        }
        notifier.send([("READY", "1"), ("STATUS", statusLine())])
        if reloadAgain {
            reloadAgain = false
            reload()
        }
    }

    private func apply(_ new: Configuration) {
        let settings = new.daemon
        sink.setLevel(options.logLevelOverride ?? settings.logLevel)
        sink.problems.resize(capacity: settings.recentProblems)
        if settings.runtimeDirectory != configuration.daemon.runtimeDirectory {
            prepareRuntimeDirectory(settings)
            if case .failure(let error) = lockRuntimeDirectory(settings.runtimeDirectory) {
                logger.error("\(error): its control socket and state.json are another daemon's; give each watchkeeper its own runtime_dir")
            }
        }
        stateDump.apply(settings)
        metrics.apply(settings)
        let tasks = new.tasks
        if settings.maxJobs != configuration.daemon.maxJobs { checkFileLimit(maxJobs: settings.maxJobs) }
        reportContainment(new, atStart: false)
        jobsQueue.queue.sync {
            engine.setMaxJobs(settings.maxJobs)
            scheduler.apply(tasks, isStart: false, stateDirectory: settings.stateDirectory)
        }
        let watches = new.watches
        watchingQueue.queue.sync { watcher.apply(watches, isStart: false, stateDirectory: settings.stateDirectory) }
        controlQueue.queue.sync { control.apply(path: ControlServer.socketPath(runtimeDirectory: settings.runtimeDirectory), group: settings.controlGroup) }
        configuration = new
    }
}
