#if canImport(Glibc)
import Glibc
#endif

/// Told when a run's progress or status changed: its run, which tells the engine.
protocol RunProgressOwner: AnyObject {
    func progressChanged()
}

/// One run's progress pipe (WATCHKEEPER_PROGRESS_FD) from spawn to the run's end: its read
/// source in the jobs' poller, the timer that resumes it, and what the job said on it last.
/// Confined to the jobs queue.
final class RunProgress {
    /// A job's progress updates are applied at most this often; between reads the pipe
    /// (enlarged to 1 MiB) buffers them.
    static let interval: Duration = .milliseconds(100)

    private let context: JobContext
    private let label: String
    /// Weak, as the run outlives its pipe's source.
    private weak var owner: (any RunProgressOwner)?
    /// Set once, in init; nil once stopped.
    private var source: PolledDescriptor?
    private var suspended = false
    private var fd: Int32 = -1
    /// Re-armed after each read: progress is applied at most every `interval`.
    private var resumeTimer: RegisteredTimer?
    private(set) var parser = ProgressParser()
    private(set) var lastUpdateAt: MonotonicInstant?

    init(watching pipe: consuming OwnedPipe, pid: pid_t, label: String, context: JobContext, owner: any RunProgressOwner) {
        self.context = context
        self.label = label
        self.owner = owner
        let target = "progress pipe of pid \(pid)"
        let stats = context.sources.register(.read, owner: label, target: target, on: context.queue)
        // Both ends close only at cancel, so the read end never hangs up while watched (see ChildProcess).
        let source = context.poller.watch(pipe, owner: label, target: target, afterClose: { [sources = context.sources] in
            sources.unregister(stats)
        }, handler: { [weak self] in
            stats.fired()
            self?.read()
        })
        fd = source.descriptor.rawValue
        self.source = source
        source.activate()
    }

    /// The last updates before the job's exit, then no more watching.
    func stop() {
        resumeTimer?.cancel()
        resumeTimer = nil
        guard let source else { return }
        read(final: true)
        self.source = nil
        suspended = false
        source.cancel()
    }

    private func read(final: Bool = false) {
        guard source != nil else { return }
        var changed = false
        context.poller.withReadBuffer { buffer in
            // Until EAGAIN: all read. EOF cannot happen: we hold the write end.
            while case .bytes(let count) = NonBlockingRead.read(fd, into: buffer) {
                if parser.feed(UnsafeRawBufferPointer(rebasing: buffer[0..<count])) { changed = true }
            }
        }
        if changed {
            lastUpdateAt = .now
            owner?.progressChanged()
        }
        // Coalesce: leave the pipe alone for a while so many updates arrive in one read.
        if !final, let source {
            source.suspend()
            suspended = true
            if resumeTimer == nil {
                resumeTimer = context.sources.makeTimer(owner: label, target: "progress: resume reading after \(Self.interval.compactDescription)",
                                                        on: context.queue) { [weak self] in
                    // The source is set once, so "still there" means "the same source".
                    guard let self, self.suspended, let current = self.source else { return }
                    self.suspended = false
                    current.resume()
                }
            }
            resumeTimer?.schedule(after: Self.interval)
        }
    }
}
