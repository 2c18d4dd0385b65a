import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// The lifecycle queue's side of the drain: what the daemon knows of it, told by the
/// engine (it never asks the jobs queue, which may be behind).
struct DrainProgress {
    var startedAt: MonotonicInstant?
    /// When the engine's current drain phase ends, as it last said: EXTEND_TIMEOUT_USEC
    /// asks systemd for time up to it.
    var phaseEnds: MonotonicInstant?
    var outcome: DrainReport?
    var extender: RegisteredTimer?
}

/// Stopping: SIGTERM or SIGINT begins the drain; its end closes the state file, the
/// control socket and the metrics, and exits.
extension LifecycleOwner {
    func beginDrain(signal: Int32) {
        let grace = configuration.daemon.shutdownGrace
        // No new runs: files still settling and runs held for dependencies end with a
        // record; then the engine cancels what waits and drains what runs.
        let (watcher, scheduler, engine) = (watcher, scheduler, engine)
        ask(queues.watching, "stop watching", { watcher.stop() }) {
            self.ask(self.queues.jobs, "stop the scheduler", { () -> Int in
                scheduler.stop()
                return engine.runningCount
            }) { running in
                self.drainStopped(running: running, signal: signal, grace: grace)
            }
        }
    }

    /// The watcher and the scheduler have stopped: the engine drains what runs.
    private func drainStopped(running: Int, signal: Int32, grace: Duration) {
        drain.startedAt = .now
        logger.notice("received \(HandledSignals.name(signal)): stopping; \(running) job(s) running, waiting up to \(grace.compactDescription) for them",
                      metadata: [JournalFields.messageIDKey: .string(MessageID.stopping.rawValue), "signal": .string(HandledSignals.name(signal))])
        notifier.send([("STOPPING", "1"), ("STATUS", status.line())])
        if running > 0 { startDrainExtender() }
        queues.jobs.async {
            self.engine.beginDrain(grace: grace, onPhaseDeadline: { [unowned self] deadline in
                self.queues.lifecycle.async { self.drain.phaseEnds = deadline }
            }) { [unowned self] report in
                self.queues.lifecycle.async {
                    self.drain.outcome = report
                    self.handle(.drainFinished)
                }
            }
        }
    }

    /// systemd kills a service that takes longer than TimeoutStopSec to stop. While jobs
    /// legitimately finish within the drain's current phase (shutdown_grace, then their
    /// expiry sequences), keep asking for a little more time, in steps, so a hung drain
    /// is still cut off.
    private func startDrainExtender() {
        let step: Duration = .seconds(5)
        let timer = sources.makeTimer(owner: "lifecycle", target: "drain: EXTEND_TIMEOUT_USEC every \(step.compactDescription)", on: queues.lifecycle) { [unowned self] in
            guard let phaseEnds = self.drain.phaseEnds else { return }
            let remaining = max(.zero, phaseEnds - .now)
            self.notifier.send([("EXTEND_TIMEOUT_USEC", String((min(remaining, step) + step).microseconds + 1_000_000)), ("STATUS", self.status.line())])
        }
        timer.schedule(at: .now(), repeating: step)
        drain.extender = timer
    }

    func finishStopping() {
        drain.extender?.cancel()
        let took = drain.startedAt?.elapsed() ?? .zero
        let how: String
        let code: Int32
        switch drain.outcome {
        case .expired(let names)?:
            how = "expired at the end of shutdown_grace: \(names.joined(separator: ", "))"
            code = ExitCode.success
        case .leftOver(let names)?:
            how = "these jobs did not end even after SIGKILL and are left behind: \(names.joined(separator: ", "))"
            code = ExitCode.software
        case .finished?, nil:
            how = "all work finished"
            code = ExitCode.success
        }
        // Every job has its record, and every owner has submitted its last writes: the
        // readers go, then the store writes what waits (retrying until its deadline), folds
        // the WAL into the file and closes it, saying what it could not write.
        let (watcher, scheduler) = (watcher, scheduler)
        ask(queues.watching, "close the watcher's reader", { watcher.close() }) {
            self.ask(self.queues.jobs, "close the scheduler's reader", { scheduler.closeStore() }) {
                self.closeStateAndLeave(took: took, how: how, code: code)
            }
        }
    }

    private func closeStateAndLeave(took: Duration, how: String, code: Int32) {
        notifier.send([("EXTEND_TIMEOUT_USEC", String((Self.stateCloseBudget + .seconds(5)).microseconds))])
        let closeState: @Sendable () -> Void = { [unowned self] in
            self.store.close(within: Self.stateCloseBudget) { [unowned self] _ in
                self.queues.lifecycle.async { self.finishStoppingAfterState(took: took, how: how, code: code) }
            }
        }
        // Every fleet job has ended: the lease is revoked (within a second) so its claims go
        // at once, and a persistent fire cut short by the stop is taken over without
        // waiting for the TTL.
        guard let cluster else { return closeState() }
        cluster.stop { [unowned self] in self.queues.lifecycle.async { closeState() } }
    }

    /// The process ends here: what the daemon logged last is written first (its own entries
    /// wait on the log's queue), unless the sink is stuck for longer than this.
    func exitAfterLogging(_ code: Int32) -> Never {
        Self.exit(code, afterLoggingTo: sink)
    }

    static func exit(_ code: Int32, afterLoggingTo sink: LogSink) -> Never {
        sink.flush(within: logFlushBudget)
        Glibc.exit(code)
    }

    static let logFlushBudget: Duration = .seconds(2)
    /// How long READY=1 waits for the ready line to be written.
    static let readyLineBudget: Duration = .milliseconds(100)

    /// What the state file's last writes may take at a clean stop (a full disk retried).
    static let stateCloseBudget: Duration = .seconds(5)

    private func finishStoppingAfterState(took: Duration, how: String, code: Int32) {
        // A reload still loading is not applied; its callers are answered before the socket
        // goes (their replies are queued on the control queue ahead of the stop).
        refuseReloadWaiters()
        // Served through the drain (`status` shows what it waits for); removed only now.
        let control = control
        ask(queues.control, "remove the control socket", { control.stop() }) {
            self.leave(took: took, how: how, code: code)
        }
    }

    private func leave(took: Duration, how: String, code: Int32) {
        let logger = logger
        let stateDump = stateDump
        let sink = sink
        metrics.writeFinal {
            stateDump.writeFinalState(reason: "stopped") {
                let level: Logger.Level = code == ExitCode.success ? .notice : .error
                logger.log(level: level, "stopped after draining for \(took.compactDescription); \(how)",
                           metadata: [JournalFields.messageIDKey: .string(MessageID.stopped.rawValue)])
                Self.exit(code, afterLoggingTo: sink)
            }
        }
    }
}
