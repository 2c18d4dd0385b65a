import CWatchkeeperSystem
import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Reloading: SIGHUP, `systemctl reload` and `watchkeeper reload` all come here, on the
/// lifecycle queue; the file is read and checked on the config queue.
extension LifecycleOwner {
    /// The configuration is read and checked on a queue of its own, so a huge or hostile
    /// file delays only the reload: SIGTERM, the dump and the watchdog's probes of the
    /// lifecycle queue are answered meanwhile. A SIGHUP during a reload asks for one more.
    func reload() {
        guard reloads.begin() else { return }
        let monotonic = MonotonicClock.nowMicroseconds()
        notifier.send([("RELOADING", "1"), ("MONOTONIC_USEC", String(monotonic)), ("STATUS", "reloading \(configuration.path)")])
        let at = WallTime.now()
        let path = configuration.path
        let environment = options.environment
        queues.config.async {
            // A reload also picks up a tzdata update for cron schedules.
            TimeZoneRules.discardCachedZones()
            let result = ConfigLoader.load(path: path, environment: environment)
            // A refused file may have cost a lot of memory to parse: give it back.
            _ = malloc_trim(0)
            self.queues.lifecycle.async { self.finishReload(result, at: at) }
        }
    }

    /// `watchkeeper reload`: a reload like SIGHUP's, answered once its result is known.
    func reloadForControl(_ reply: @escaping ControlReply) {
        dispatchPrecondition(condition: .onQueue(queues.lifecycle.queue))
        reloads.wait(reply)
        handle(.reloadRequested)
    }

    /// The daemon is stopping: those waiting for this reload and those waiting for the next
    /// one get NotRunning (exit 75), not a connection closed under them.
    func refuseReloadWaiters() {
        let stopping = ControlInterface.ErrorName.notRunning.error([.init("state", .string(machine.state.description))])
        for reply in reloads.takeAll() { reply(.failure(stopping)) }
    }

    private func finishReload(_ result: Result<Configuration, ConfigErrors>, at: WallTime) {
        let (answered, again) = reloads.finished()
        guard case .running = machine.state else {
            logger.notice("a reload finished while stopping; its result is not applied")
            let stopping = ControlInterface.ErrorName.notRunning.error([.init("state", .string(machine.state.description))])
            for reply in answered { reply(.failure(stopping)) }
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
        if case .success(let loaded) = result, loaded.cluster != configuration.cluster {
            // Claims of running fleet jobs are bound to the lease of the cluster in force:
            // another cluster, prefix or name would orphan them. Refused whole.
            result = .failure(ConfigErrors([ConfigDiagnostic(file: loaded.path, position: nil, message:
                "[cluster] cannot change on reload (fleet claims in force are bound to this host's current etcd lease): restart watchkeeper to apply it")]))
        }
        switch result {
        case .success(let loaded):
            apply(loaded) {
                self.generation += 1
                // After the bump: the file's first write at its (new) path says the generation
                // in force, not the one before (the owners' steps can take longer than its interval).
                self.metrics.apply(loaded.daemon)
                self.loadedAt = at
                self.lastReload = (at, nil)
                self.logger.notice("reloaded \(loaded.path): configuration generation \(self.generation) in force",
                                   metadata: [JournalFields.messageIDKey: .string(MessageID.reloadSucceeded.rawValue), "generation": .stringConvertible(self.generation)])
                self.answerReload(answered, with: .success([.init("generation", .int(self.generation))]), again: again)
            }
        case .failure(let errors):
            lastReload = (at, errors)
            for line in errors.lines {
                logger.error("\(line)", metadata: [JournalFields.messageIDKey: .string(MessageID.configInvalid.rawValue)])
            }
            logger.error("unable to reload \(configuration.path): \(errors.total) error(s); configuration generation \(generation) stays in force",
                         metadata: [JournalFields.messageIDKey: .string(MessageID.reloadFailed.rawValue), "errors": .string(errors.description)])
            answerReload(answered, with: .failure(ControlInterface.ErrorName.reloadFailed.error([
                .init("generation", .int(generation)), .init("errors", .array(errors.lines.map { .string($0) })),
            ])), again: again)
        }
    }

    private func answerReload(_ answered: [ControlReply], with answer: Result<[DumpField], VarlinkError>, again: Bool) {
        for reply in answered { reply(answer) }
        // The result is in the journal before systemd's "Reloaded" (as the ready line).
        sink.flush(within: Self.readyLineBudget)
        notifier.send([("READY", "1"), ("STATUS", status.line())])
        if again { reload() }
    }

    /// The new configuration, to each owner on its queue; `then` once all have it.
    private func apply(_ new: Configuration, then: @escaping @Sendable () -> Void) {
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
        let tasks = new.tasks
        if settings.maxJobs != configuration.daemon.maxJobs { checkFileLimit(maxJobs: settings.maxJobs) }
        reportContainment(new, atStart: false)
        let (engine, scheduler, watcher, control) = (engine, scheduler, watcher, control)
        let watches = new.watches
        let socket = ControlServer.socketPath(runtimeDirectory: settings.runtimeDirectory)
        ask(queues.jobs, "apply max_jobs and the tasks", {
            engine.setMaxJobs(settings.maxJobs)
            scheduler.apply(tasks, isStart: false, stateDirectory: settings.stateDirectory)
        }) {
            self.ask(self.queues.watching, "apply the watch rules", { watcher.apply(watches, isStart: false, stateDirectory: settings.stateDirectory) }) {
                self.ask(self.queues.control, "apply the control socket's settings", {
                    control.apply(path: socket, group: settings.controlGroup, readGroup: settings.readGroup)
                }) {
                    self.configuration = new
                    then()
                }
            }
        }
    }
}
