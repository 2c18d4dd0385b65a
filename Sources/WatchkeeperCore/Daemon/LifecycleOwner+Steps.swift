import Dispatch

/// What the lifecycle queue asked of other owners' queues and has not had confirmed yet,
/// and the lifecycle events that wait for those steps. A pure value, on the lifecycle queue.
///
/// The lifecycle queue is one the watchdog gates on, so it never waits in `.sync` for
/// another queue: a stuck watching queue would hold the lifecycle too, and with it SIGTERM,
/// the dump's daemon section and every reload. It asks instead, and the answer comes back
/// as a turn of its own queue. The events that arrive meanwhile (a SIGTERM during the start,
/// a SIGHUP while a reload is being applied) wait for the last step's answer, so a stop
/// never overtakes a start or a reload half applied, as it could not while the lifecycle
/// queue waited in `.sync`.
struct LifecycleSteps {
    struct Step {
        let id: UInt64
        let what: String
        let queue: String
        let since: MonotonicInstant
    }

    private(set) var inFlight: [Step] = []
    private(set) var held: [LifecycleEvent] = []
    private var nextID: UInt64 = 0

    mutating func begin(_ what: String, on queue: String, at now: MonotonicInstant) -> UInt64 {
        nextID += 1
        inFlight.append(Step(id: nextID, what: what, queue: queue, since: now))
        return nextID
    }

    mutating func end(_ id: UInt64) {
        inFlight.removeAll { $0.id == id }
    }

    /// The event to handle now, or nil when it waits for the steps in flight.
    mutating func admit(_ event: LifecycleEvent) -> LifecycleEvent? {
        guard !inFlight.isEmpty || !held.isEmpty else { return event }
        held.append(event)
        return nil
    }

    /// The held events, in their order, once no step is in flight.
    mutating func release() -> [LifecycleEvent] {
        guard inFlight.isEmpty else { return [] }
        defer { held = [] }
        return held
    }

    func describe(now: MonotonicInstant = .now) -> DumpValue {
        .array(inFlight.map { step in
            .object([
                .init("step", .string(step.what)),
                .init("queue", .string(step.queue)),
                .init("waiting_s", .double((now - step.since).secondsDouble)),
            ])
        })
    }
}

extension LifecycleOwner {
    /// How long a step may take before the lifecycle says which queue has not answered. It
    /// goes on waiting (the step's result is needed: READY=1 promises the watches, a reload
    /// its configuration, a stop a closed state file); the watchdog judges a stuck queue.
    static let stepWarningAfter: Duration = .seconds(30)

    /// Runs `work` on `queue` and `then` with its answer on the lifecycle queue; lifecycle
    /// events wait meanwhile. Past `warnAfter` without an answer, says what waits, where.
    func ask<Answer: Sendable>(_ queue: SubsystemQueue, _ what: String, warnAfter: Duration = LifecycleOwner.stepWarningAfter,
                               _ work: @escaping @Sendable () -> Answer, then: @escaping @Sendable (Answer) -> Void) {
        dispatchPrecondition(condition: .onQueue(queues.lifecycle.queue))
        let id = steps.begin(what, on: queue.name, at: .now)
        let late = sources.makeTimer(owner: "lifecycle", target: "confirmation from \(queue.label): \(what)", on: queues.lifecycle) { [unowned self] in
            self.logger.warning("the \(queue.label) queue has not answered after \(warnAfter.compactDescription): \(what); the lifecycle waits on (the dump's daemon section shows what it waits for)")
        }
        late.schedule(after: warnAfter)
        queue.async {
            let answer = work()
            self.queues.lifecycle.async {
                late.cancel()
                self.steps.end(id)
                then(answer)
                for event in self.steps.release() { self.handle(event) }
            }
        }
    }

    /// Every lifecycle event comes here, on the lifecycle queue.
    func handle(_ event: LifecycleEvent) {
        dispatchPrecondition(condition: .onQueue(queues.lifecycle.queue))
        guard let event = steps.admit(event) else { return }
        perform(machine.handle(event))
    }
}
