import WatchkeeperCore

/// The shared inbox's directory, which every host sees: files arrive, and a job that ended
/// ok may move its file out (to done/), as the usual inbox job does.
final class SimDirectory {
    struct File {
        let size: Int64
        let modified: Int64
        var present = true
    }

    private(set) var files: [String: File] = [:]

    func add(_ name: String, size: Int64, modified: Int64) {
        files[name] = File(size: size, modified: modified)
    }

    func remove(_ name: String) { files[name]?.present = false }

    func isPresent(_ name: String) -> Bool { files[name]?.present ?? false }

    var presentNames: [String] { files.filter(\.value.present).keys.sorted() }
}

/// A host's watcher of the shared inbox (a `fleet = "one"` rule): it sees files some time
/// after they arrive (a poll of the share), and at every start it lists the inbox (catch-up);
/// a file already in flight here, or handled here before (the ledger, kept across restarts),
/// is not submitted again.
final class SimInbox {
    unowned let host: SimIncarnation
    var inFlight: Set<String> = []
    var held: Set<String> = []
    private var retryArmed = false

    init(host: SimIncarnation) {
        self.host = host
    }

    var directory: SimDirectory { host.simulation.directory }

    /// Admission: a present file not in flight and not handled here goes on.
    func see(_ name: String) {
        guard host.alive, host.accepting, directory.isPresent(name), !inFlight.contains(name), !host.persistent.handled.contains(name) else { return }
        inFlight.insert(name)
        held.remove(name)
        host.admit(name)
    }

    func scan() {
        for name in directory.presentNames { see(name) }
    }

    /// A file that could not be claimed now waits for the lease, or a second.
    func hold(_ name: String) {
        inFlight.remove(name)
        held.insert(name)
        guard !retryArmed else { return }
        retryArmed = true
        host.loop.after(.seconds(1)) { [weak self] in
            guard let self, self.host.alive else { return }
            self.retryArmed = false
            self.retryHeld()
        }
    }

    func retryHeld() {
        let names = held.sorted()
        held.removeAll()
        for name in names { see(name) }
    }
}
