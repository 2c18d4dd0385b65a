import Dispatch

#if canImport(Glibc)
import Glibc
#endif

/// A shared inbox's part of a rule's state: files held for want of a lease, and files this
/// host handled whose records go when they do.
struct FleetRuleState {
    var held: [[UInt8]: WatchEvent] = [:]
    var doneHere: Set<[UInt8]> = []
    var ranHere: UInt64 = 0
    var ranElsewhere: UInt64 = 0
    var released: UInt64 = 0
    var heldTotal: UInt64 = 0
    static let doneLimit = 65_536

    func describe() -> DumpValue {
        .object([
            .init("scope", .string("one")),
            .init("ran_here", .int(Int64(ranHere))),
            .init("ran_elsewhere", .int(Int64(ranElsewhere))),
            .init("released_by_others", .int(Int64(released))),
            .init("held_now", .int(Int64(held.count))),
            .init("held_total", .int(Int64(heldTotal))),
        ])
    }
}

/// `fleet = "one"` on a watch rule: a shared inbox (docs/fleet.md). The watcher submits a
/// file's job as for any rule; the job engine claims the file in etcd when a slot is free
/// for it (Jobs/FleetStarts.swift) and records its end there. Here, on the watching queue:
/// files handed back because no claim could be made (held, tried again when the lease is
/// back), files another host released, and the records of files handled here that left
/// the inbox. Confined to the watching queue.
// @unchecked Sendable: confined to the watching queue, as every part of the watcher.
final class FleetInbox: @unchecked Sendable {
    private let state: WatchingState
    /// A file to admission again, as a scan's find (gone or handled meanwhile: nothing).
    private let requeue: (WatchRule, [UInt8], WatchEvent) -> Void
    /// This host in the fleet, when `[cluster]` is configured.
    let cluster: FleetMember?
    private var retryTimer: (any WatchTimer)?

    init(state: WatchingState, cluster: FleetMember?, requeue: @escaping (WatchRule, [UInt8], WatchEvent) -> Void) {
        self.state = state
        self.cluster = cluster
        self.requeue = requeue
    }

    /// A fleet rule's completion: true if it was held (the file waits here to be claimed,
    /// no ledger record); otherwise the usual completion follows.
    func finished(_ completion: JobCompletion, rule: WatchRule) -> Bool {
        guard cluster != nil else { return false }
        switch completion.final.outcome {
        case .held:
            for file in completion.subject.files {
                for follower in rule.memory.returned(file) { rule.fleet.held[follower.path] = follower.event }
                if rule.fleet.held.isEmpty { state.logger.info("watch \(rule.name): files are held until they can be claimed in etcd: \(completion.final.detail ?? "no lease")") }
                rule.fleet.held[Array(file.relative)] = file.event
                rule.fleet.heldTotal += 1
            }
            armRetry()
            return true
        case .ranElsewhere:
            rule.fleet.ranElsewhere += 1
        case .ok:
            rule.fleet.ranHere += 1
            for file in completion.subject.files { keepRecord(of: file, rule: rule) }
        default:
            break
        }
        return false
    }

    /// A file handled here: its record in etcd stays as long as the file does (a stat on a
    /// share could hang: there it stays until the file's deletion is seen).
    private func keepRecord(of file: FileSubject, rule: WatchRule) {
        let relative = Array(file.relative)
        var info = stat()
        let present = !file.checksBeforeStart || file.path.withUnsafeBufferPointer { buffer in
            var bytes = Array(buffer)
            bytes.append(0)
            return bytes.withUnsafeBufferPointer { lstat(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), &info) == 0 }
        }
        if present {
            if rule.fleet.doneHere.count >= FleetRuleState.doneLimit { rule.fleet.doneHere.removeAll(keepingCapacity: true) }
            rule.fleet.doneHere.insert(relative)
        } else {
            cluster?.forgetFile(rule: rule.name, relative: relative)
        }
    }

    /// A file this host handled is gone: its record in etcd goes too, after a while.
    func fileGone(_ rule: WatchRule, relative: [UInt8]) {
        guard rule.fleet.doneHere.remove(relative) != nil else { return }
        cluster?.forgetFile(rule: rule.name, relative: relative)
    }

    func released(rule name: String, relative: [UInt8]) {
        guard let rule = state.rules[name], rule.settings.fleet == .one, state.accepting else { return }
        rule.fleet.released += 1
        // Admission looks at the file again (gone, or handled here meanwhile: nothing).
        requeue(rule, relative, rule.settings.events.first ?? .closedWrite)
    }

    /// The lease is back, or a slot is free: held files are tried again.
    func retryHeldFiles() {
        guard state.accepting else { return }
        for rule in state.ordered where rule.settings.fleet == .one && !rule.fleet.held.isEmpty {
            let held = rule.fleet.held
            rule.fleet.held = [:]
            for (relative, event) in held { requeue(rule, relative, event) }
        }
    }

    private func armRetry() {
        if retryTimer == nil {
            retryTimer = state.clock.makeTimer(owner: "watcher", target: "shared inbox files held: claim again") { [weak self] in
                self?.retryHeldFiles()
            }
        }
        retryTimer?.schedule(at: state.clock.now + .seconds(1))
    }
}
