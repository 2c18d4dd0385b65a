import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Roots, on the watching queue: resolving a rule's configured path to the directory
/// watched, noticing when the path stops leading there (the root or an ancestor renamed or
/// removed, a link on the path retargeted, a file system mounted over it), and watching for
/// a missing root to appear (its parent's events, and a recheck every 5 s). Confined to the
/// watching queue.
// @unchecked Sendable: confined to the watching queue, as every part of the watcher.
final class RootTracking: @unchecked Sendable {
    private let state: WatchingState
    private let backends: WatchBackends
    private let scans: TreeScans
    private let pollers: RulePollers
    private let settling: FileSettling
    private var recheckTimer: (any WatchTimer)?
    private var clock: any WatchClock { state.clock }
    private var logger: Logger { state.logger }
    private var accepting: Bool { state.accepting }

    static let recheckInterval: Duration = .seconds(5)

    init(state: WatchingState, backends: WatchBackends, scans: TreeScans, pollers: RulePollers, settling: FileSettling) {
        self.state = state
        self.backends = backends
        self.scans = scans
        self.pollers = pollers
        self.settling = settling
    }

    /// Watches the rule's root, resolving symbolic links, or notes it missing and watches
    /// for it to appear. `catchUp`: the files already there are handled (those not in the
    /// ledger in their current form).
    func watchRoot(_ rule: WatchRule, catchUp: Bool) {
        // A rule that only polls needs no inotify for its tree (its ancestors are watched if
        // inotify is there).
        guard backends.inotify != nil || rule.settings.method == .poll || rule.settings.method == .fanotify else { return }
        switch Self.resolveDirectory(rule.settings.path) {
        case .unusable(let why):
            if !rule.isMissing || rule.location.note == nil {
                logger.warning("watch \(rule.name): unable to watch \(rule.settings.path): \(why); watching for it to appear (and checking every \(Self.recheckInterval.compactDescription))")
            }
            rule.location.root = nil
            rule.location.note = why
            watchParent(of: rule)
            armRecheckIfNeeded()
        case .directory(let resolved):
            dropParentWatch(of: rule)
            let configured = rule.configuredRoot
            let note = resolved == configured ? nil : "a symbolic link to \(LineEscaping.escaped(resolved)); watching that directory"
            if note != nil && note != rule.location.note {
                logger.notice("watch \(rule.name): \(rule.settings.path) is \(note!)")
            } else if rule.location.note != nil && rule.root == nil {
                logger.notice("watch \(rule.name): \(rule.settings.path) is there (again); watching it\(catchUp ? " and catching up its files" : "")")
            }
            rule.location.root = resolved
            rule.location.note = note
            watchAncestors(of: rule, resolved: resolved)
            // The polled trees first: a file of a network file system admitted from the walk
            // below is known by its remote identity (PolledTree) from the start.
            pollers.startPolling(rule)
            guard rule.settings.method != .poll else { return }
            scans.take(rule.backend.atStart(method: rule.settings.method), for: rule)
            scans.addTree(rule, from: [], emitFiles: catchUp)
        }
    }

    enum ResolvedRoot: Equatable {
        case directory([UInt8])
        case unusable(String)
    }

    /// The real path of a directory (symbolic links resolved), or why there is none.
    static func resolveDirectory(_ path: String) -> ResolvedRoot {
        let resolved: UnsafeMutablePointer<CChar>
        switch pointerOrErrno({ realpath(path, nil) }) {
        case .success(let real): resolved = real
        case .failure(.noSuchFileOrDirectory): return .unusable("no such directory")
        case .failure(let error): return .unusable(error.description)
        }
        defer { free(resolved) }
        var info = stat()
        if case .failure(let error) = nothingOrErrno({ stat(resolved, &info) }) { return .unusable(error.description) }
        guard (info.st_mode & S_IFMT) == S_IFDIR else { return .unusable("not a directory") }
        return .directory(Array(String(cString: resolved).utf8))
    }

    /// The root was renamed away, deleted or unmounted: its old watches would report the
    /// moved tree's events under the old path, so all of them go, and the path is watched
    /// for whatever appears there next.
    func lose(_ rule: WatchRule, why: String) {
        guard !rule.isMissing else { return }
        rule.counters.rootsLost += 1
        unwatch(rule)
        logger.warning("watch \(rule.name): \(rule.settings.path) \(why); its old tree is no longer watched, and a new directory at that path will be watched and caught up")
        // What waits to settle was seen in the old tree: its paths now name whatever the new
        // one holds. The new root's catch-up finds what is there; jobs already handed to the
        // engine find their file gone or replaced just before they start, and do not run.
        settling.cancelSettling(rule, detail: "the root \(why)")
        rule.location.root = nil
        rule.location.note = why
        // Something may already be there (rename and mkdir in one breath).
        watchRoot(rule, catchUp: true)
    }

    /// The tree's watches, polls and walks end. What waits to settle stays, with its timer
    /// (cancelSettling drops both): a remount's catch-up skips a polled share's files, and
    /// their poller's finds defer to that wait, so without its timer they never ran.
    func unwatch(_ rule: WatchRule) {
        rule.scans.fallbackTimer?.cancel()
        rule.scans.fallbackTimer = nil
        rule.scans.unwatchable.removeAll()
        pollers.stopPolling(rule)
        backends.unwatch(rule)
        // A listing of the old tree stops.
        rule.scans.listing = nil
        rule.scans.listingTimer?.cancel()
        rule.scans.listingTimer = nil
        rule.location.links = []
    }

    // MARK: Ancestors and links

    /// The root's path can stop naming the watched directory without the root itself moving:
    /// an ancestor renamed or removed (`mv /srv/p /srv/p.old; mkdir -p /srv/p/in`), or a
    /// symbolic link on the path retargeted (`ln -sfn v2 current`, the deploy pattern). The
    /// old watches would go on reporting the old directory under the configured path, so each
    /// ancestor of the real root is watched for IN_MOVE_SELF and IN_DELETE_SELF, and each
    /// directory holding a link of the configured path for changes of that name. Costs one
    /// watch per level of the path (shared between rules), and events for other names in a
    /// link's directory, which are dropped here by name.
    func watchAncestors(of rule: WatchRule, resolved: [UInt8]) {
        guard let backend = backends.inotify else { return }
        let slash = UInt8(ascii: "/")
        var links: Set<[UInt8]> = []
        var watched: [([UInt8], InotifyMask)] = []
        // The real root's ancestors, "/" excepted: it cannot be renamed or removed.
        var ancestor = Array(resolved)
        while let cut = ancestor.lastIndex(of: slash), cut > 0 {
            ancestor = Array(ancestor[..<cut])
            watched.append((ancestor, [.moveSelf, .deleteSelf]))
        }
        // Every symbolic link on the configured path, by the directory that holds it.
        var prefix: [UInt8] = []
        for component in rule.configuredRoot.split(separator: slash) {
            let parent = prefix.isEmpty ? [slash] : prefix
            prefix += [slash] + component
            var info = stat()
            let isLink = TreeScanner.withCString(prefix) { lstat($0, &info) } == 0 && info.st_mode & S_IFMT == S_IFLNK
            guard isLink, case .directory(let realParent) = Self.resolveDirectory(String(decoding: parent, as: UTF8.self)) else { continue }
            links.insert(Array(realParent.dropFirst()) + (realParent.count > 1 ? [slash] : []) + Array(component))
            watched.append((realParent, [.create, .movedTo, .delete, .movedFrom]))
        }
        rule.location.links = links
        for (directory, events) in watched {
            // Gone already: the rename or removal is seen by the root's own watch or the recheck.
            _ = backend.watch(.init(owner: .ancestorsOf(rule.name), relative: Array(directory.dropFirst())), path: directory,
                              events: events.union([.onlyDirectory, .dontFollow]))
        }
    }

    /// An event on a directory above a root: its own rename or removal, or an entry of it.
    func ancestorChanged(_ rule: WatchRule, at location: WatchTable<WatchOwner>.Location, event: InotifyEvent?, why: String?) {
        guard !rule.isMissing else { return }
        let path = LineEscaping.escaped([UInt8(ascii: "/")] + location.relative)
        if let why {
            lose(rule, why: "is no longer where it was: \(path) above it \(why)")
            return
        }
        guard let event, rule.location.links.contains(location.path(of: event.name)) else { return }
        // A link of the path was replaced, removed or made: does the path still lead here?
        switch Self.resolveDirectory(rule.settings.path) {
        case .directory(let resolved) where resolved == rule.root:
            return
        case .directory(let resolved):
            lose(rule, why: "now leads to \(LineEscaping.escaped(resolved)) (the symbolic link \(LineEscaping.escaped([UInt8(ascii: "/")] + location.path(of: event.name))) changed)")
        case .unusable(let reason):
            lose(rule, why: "no longer leads to a directory (the symbolic link \(LineEscaping.escaped([UInt8(ascii: "/")] + location.path(of: event.name))) changed: \(reason))")
        }
    }

    /// Watches the nearest directory above the missing root that exists, for the next
    /// component of the root's path to appear there: a root whose parents went too
    /// (`mv p p.old; mkdir -p p/in`) is seen at once, not at the next periodic check. Each
    /// step down moves the watch deeper.
    private func watchParent(of rule: WatchRule) {
        guard let backend = backends.inotify else { return }
        let slash = UInt8(ascii: "/")
        var awaited = rule.configuredRoot
        while let cut = awaited.lastIndex(of: slash) {
            let parent = cut == 0 ? [slash] : Array(awaited[..<cut])
            let name = Array(awaited[(cut + 1)...])
            // Any new entry: the root may come back as a directory or as a link to one.
            if case .success = backend.watch(.init(owner: .parentOf(rule.name), relative: []), path: parent, events: [.create, .movedTo, .onlyDirectory]) {
                rule.location.awaitedName = name
                return
            }
            guard cut > 0 else { return }
            awaited = parent
        }
    }

    private func dropParentWatch(of rule: WatchRule) {
        backends.inotify?.unwatch(.parentOf(rule.name), under: [])
    }

    func armRecheckIfNeeded() {
        guard recheckTimer == nil, accepting, state.rules.values.contains(where: \.isMissing) else { return }
        let timer = clock.makeTimer(owner: "watching", target: "missing watch roots: check every \(Self.recheckInterval.compactDescription)") { [unowned self] in
            // A root that comes back may already hold files: they are handled.
            for rule in self.state.ordered where rule.isMissing { self.watchRoot(rule, catchUp: true) }
            if !self.state.rules.values.contains(where: \.isMissing) {
                self.recheckTimer?.cancel()
                self.recheckTimer = nil
            }
        }
        timer.schedule(at: clock.now + Self.recheckInterval, repeating: Self.recheckInterval)
        recheckTimer = timer
    }

    // MARK: Mounts

    /// A file system mounted on (or unmounted from) a watched directory or one above a
    /// root: the old watches see the covered directory, so the subtree is watched again at
    /// its path and its files caught up.
    func mountsChanged(_ change: MountChange) {
        let points = change.addedMountPoints.union(change.removedMountPoints)
        for rule in state.ordered {
            guard let root = rule.root else { continue }
            for point in points {
                if point == root || (root.starts(with: point) && (point == [UInt8(ascii: "/")] || root.count > point.count && root[point.count] == UInt8(ascii: "/"))) {
                    // On the root or above it: the root path may now be another directory.
                    let verb = change.addedMountPoints.contains(point) ? "mounted on" : "unmounted from"
                    logger.notice("watch \(rule.name): a file system was \(verb) \(LineEscaping.escaped(point)); watching \(rule.settings.path) again and catching up its files")
                    unwatch(rule)
                    rule.location.root = nil
                    watchRoot(rule, catchUp: true)
                    break
                } else if point.count > root.count, point.starts(with: root), point[root.count] == UInt8(ascii: "/"), rule.settings.recursive {
                    let relative = Array(point[(root.count + 1)...])
                    let verb = change.addedMountPoints.contains(point) ? "mounted on" : "unmounted from"
                    remount(rule, at: relative, why: "a file system was \(verb) \(LineEscaping.escaped(point))")
                }
            }
        }
    }

    /// Watches `relative` and below again, and catches up their files.
    func remount(_ rule: WatchRule, at relative: [UInt8], why: String) {
        guard !rule.isMissing else { return }
        if relative.isEmpty {
            unwatch(rule)
            rule.location.root = nil
            logger.notice("watch \(rule.name): \(why); watching \(rule.settings.path) again and catching up its files")
            watchRoot(rule, catchUp: true)
            return
        }
        logger.notice("watch \(rule.name): \(why); watching it again and catching up its files")
        if rule.settings.method == .poll {
            // Polled from the root down: a new poll of the whole tree catches it up.
            pollers.startPolling(rule)
            return
        }
        pollers.refreshPolling(rule)
        scans.dropSubtree(rule, relative: relative)
        if rule.backend.usesFanotify { scans.markMountPoint(rule, relative: relative) }
        scans.addTree(rule, from: relative, emitFiles: true)
    }

    /// The drain: missing roots are not looked for any more.
    func stop() {
        recheckTimer?.cancel()
        recheckTimer = nil
    }
}
