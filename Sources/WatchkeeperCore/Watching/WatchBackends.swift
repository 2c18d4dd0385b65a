import Logging
import SystemPackage

/// The watcher's backends, on the watching queue: the inotify instance every rule shares
/// (its trees, their ancestors, missing roots' parents) and the fanotify group for the
/// trees that moved to it, each opened the first time it is needed and nil for good, with
/// why, when this daemon cannot have it. Which one a tree has is the rule's
/// TreeBackendChoice; moving a tree is done here.
final class WatchBackends {
    private let kernel: WatchKernel
    private let queue: SubsystemQueue
    private let sources: SourceRegistry
    private let problems: ProblemAggregator
    private let logger: Logger
    private let environment: [String: String]
    private let onChanges: (WatchBackendKind, [WatchBackend.Change]) -> Void
    private(set) var inotify: (any WatchBackend)?
    private(set) var inotifyProblem: String?
    private(set) var fanotify: (any TreeMarkingBackend)?
    private(set) var fanotifyProblem: String?

    init(kernel: WatchKernel, queue: SubsystemQueue, sources: SourceRegistry, problems: ProblemAggregator, logger: Logger,
         environment: [String: String], onChanges: @escaping (WatchBackendKind, [WatchBackend.Change]) -> Void) {
        self.kernel = kernel
        self.queue = queue
        self.sources = sources
        self.problems = problems
        self.logger = logger
        self.environment = environment
        self.onChanges = onChanges
    }

    /// The inotify instance, the first time a rule needs it.
    func openInotifyIfNeeded() {
        guard inotify == nil, inotifyProblem == nil else { return }
        do throws(Errno) {
            inotify = try kernel.inotify(queue, sources, problems) { [unowned self] changes in self.onChanges(.inotify, changes) }
        } catch {
            var message = "unable to create an inotify instance: \(error)"
            if error == .tooManyOpenFiles {
                message += " (fs.inotify.max_user_instances=\(InotifyBackend.sysctl("max_user_instances") ?? "?") reached; raise it with sysctl fs.inotify.max_user_instances=1024)"
            }
            inotifyProblem = message
            logger.error("\(message); watch rules will not see events")
        }
    }

    /// The fanotify group, made the first time a rule needs it; nil (and `fanotifyProblem`
    /// says why) when the kernel or this process's capabilities do not allow it.
    private func openFanotifyIfNeeded() -> (any TreeMarkingBackend)? {
        if let fanotify { return fanotify }
        guard fanotifyProblem == nil else { return nil }
        do throws(Errno) {
            fanotify = try kernel.fanotify(queue, sources, problems) { [unowned self] changes in self.onChanges(.fanotify, changes) }
        } catch {
            fanotifyProblem = FanotifyRefusal.group(error, privileges: .current())
        }
        return fanotify
    }

    /// The backend of the rule's own tree (its ancestors are always inotify's).
    func tree(of rule: WatchRule) -> (any WatchBackend)? {
        rule.backend.usesFanotify ? fanotify : inotify
    }

    /// Directories of one tree beyond which `auto` moves it from inotify to fanotify: about
    /// 100 MiB of kernel memory in inotify watches (each pins its directory's inode).
    /// WATCHKEEPER_TEST_FANOTIFY_ABOVE lowers it for the tests (docs/testing.md).
    var fanotifyAbove: Int {
        if let text = environment["WATCHKEEPER_TEST_FANOTIFY_ABOVE"], let value = Int(text), value >= 0 { return value }
        return Self.defaultFanotifyAbove
    }

    static let defaultFanotifyAbove = 100_000

    /// Watches the rule's tree with fanotify from now on, because of `why`: the mark is
    /// placed before the tree's inotify watches go, so no event falls between. Returns the
    /// mount points below the root that could not be marked, for the caller to report; nil
    /// when fanotify cannot take the tree (said once per reason; not asked again until the
    /// tree is watched anew).
    func moveToFanotify(_ rule: WatchRule, why: String, mounts: [MountInfoEntry]) -> [(path: [UInt8], error: Errno)]? {
        guard let root = rule.root else { return nil }
        let refusal: String
        if let tree = rule.polling.remoteTree(holding: []) {
            refusal = "it is on \(tree.fileSystemType), a network or FUSE file system, which is polled instead"
        } else if let fanotify = openFanotifyIfNeeded() {
            let points = Self.localMountPoints(below: root, rule: rule, mounts: mounts)
            switch fanotify.startTree(.rule(rule.name), root: root, recursive: rule.settings.recursive, events: rule.watchMask, mountPoints: points) {
            case .success(let unmarked):
                let had = rule.backend.movedToFanotify()
                // Not a plain unwatch: what inotify queued for the tree before the mark (a
                // directory made just before) still counts, and the removals must not overflow
                // the queue every other rule's events share.
                inotify?.handOver(.rule(rule.name))
                let marks = fanotify.watchedCount(of: .rule(rule.name))
                logger.notice("watch \(rule.name): watching \(LineEscaping.escaped(root)) with fanotify, because \(why): \(marks) file system mark\(marks == 1 ? "" : "s") instead of one inotify watch per directory\(had > 0 ? " (its \(had) inotify watches are removed)" : "")")
                return unmarked
            case .failure(let failure):
                let fileSystem = MountInfoEntry.containing(root, in: mounts)?.fileSystemType ?? "unknown"
                refusal = FanotifyRefusal.tree(failure, fileSystem: fileSystem, privileges: .current())
            }
        } else {
            refusal = fanotifyProblem ?? "fanotify is not available"
        }
        if rule.backend.fanotifyRefused(refusal) {
            logger.warning("watch \(rule.name): unable to use fanotify for \(LineEscaping.escaped(root)) (\(why)): \(refusal); watching it with inotify")
        }
        return nil
    }

    /// A file system mounted at `relative` in a fanotify tree: marked if it is local. The
    /// errno when it could not be (the caller reports it and scans it by the fallback).
    func markMountPoint(_ rule: WatchRule, relative: [UInt8], mounts: [MountInfoEntry]) -> Errno? {
        guard let fanotify, let root = rule.root else { return nil }
        let path = rule.absolute(relative)
        guard Self.localMountPoints(below: root, rule: rule, mounts: mounts).contains(path) else { return nil }
        if case .failure(let error) = fanotify.addMountPoint(.rule(rule.name), path: path) { return error }
        return nil
    }

    /// Local file systems mounted below `root` for a recursive rule: each needs a mark of
    /// its own. Network and FUSE ones are polled, not marked.
    private static func localMountPoints(below root: [UInt8], rule: WatchRule, mounts: [MountInfoEntry]) -> [[UInt8]] {
        guard rule.settings.recursive else { return [] }
        var points: [[UInt8]] = []
        for mount in mounts where FilesystemClass.reasonToPoll(mount.fileSystemType) == nil {
            guard let relative = relativePath(mount.mountPoint, under: root), !relative.isEmpty,
                  rule.polling.remoteTree(holding: relative) == nil, !points.contains(mount.mountPoint) else { continue }
            points.append(mount.mountPoint)
        }
        return points
    }

    /// The rule's tree and ancestors are watched no more; its tree goes back to inotify.
    func unwatch(_ rule: WatchRule) {
        inotify?.unwatch(.rule(rule.name), under: [])
        fanotify?.unwatch(.rule(rule.name), under: [])
        rule.backend.unwatched()
        inotify?.unwatch(.ancestorsOf(rule.name), under: [])
    }

    /// The inotify instance's queue size when it was made, and now if the sysctl changed.
    var inotifyQueueSize: String {
        let now = InotifyBackend.sysctl("max_queued_events") ?? "?"
        return (inotify as? InotifyBackend)?.queueSize.map { $0 == now ? $0 : "\($0) when watching started, \(now) now" } ?? now
    }

    func describe() -> [DumpField] {
        let inotifyFields = inotify?.describe() ?? [.init("inotify", .string(inotifyProblem ?? "not needed"))]
        return inotifyFields + [.init("fanotify", fanotify.map { .object($0.describe()) } ?? .string(fanotifyProblem ?? "not needed"))]
    }
}
