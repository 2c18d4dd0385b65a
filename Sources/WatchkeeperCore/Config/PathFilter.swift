/// Which paths of a watched directory a rule handles.
///
/// A path is selected when it matches at least one include pattern (an empty include list
/// means every path), neither it nor any directory above it matches an exclude pattern, and
/// (with `excludesTemporaryNames`, the default of a rule: `exclude_temporary`) it is not a
/// temporary name a tool writes before it renames the file into place (`TemporaryNames`).
/// Excluding a directory excludes everything in it, as in gitignore: with `exclude = [".*"]`
/// the file `.git/config` is excluded because `.git` is. Includes match the whole path
/// only: to include a directory's contents, write `incoming/**`.
public struct PathFilter: Sendable, Equatable {
    public let include: [GlobPattern]
    public let exclude: [GlobPattern]
    public let excludesTemporaryNames: Bool

    public init(include: [GlobPattern], exclude: [GlobPattern], excludesTemporaryNames: Bool = false) {
        self.include = include
        self.exclude = exclude
        self.excludesTemporaryNames = excludesTemporaryNames
    }

    public func selects(_ relativePath: [UInt8]) -> Bool {
        let components = PathComponents.ranges(of: relativePath)
        // The root of the watch is a directory, never a file to hand to a task.
        guard !components.isEmpty else { return false }
        if excludesTemporaryNames && TemporaryNames.contains(relativePath, components) { return false }
        if exclude.contains(where: { $0.matchesPathOrAncestor(relativePath, components) }) {
            return false
        }
        if include.isEmpty { return true }
        var steps = 0
        return include.contains { $0.matches(relativePath, steps: &steps) }
    }

    public func selects(_ relativePath: String) -> Bool {
        selects(Array(relativePath.utf8))
    }

    /// A temporary name this filter leaves out: a file renamed from it to a selected name
    /// arrives there (for a rule without `moved_in` too).
    public func isTemporary(_ relativePath: [UInt8]) -> Bool {
        excludesTemporaryNames && TemporaryNames.contains(relativePath, PathComponents.ranges(of: relativePath))
    }

    /// Whether a directory at this relative path could contain selected files, so that
    /// recursive watching can skip excluded subtrees. A directory is pruned when it or a
    /// directory above it matches an exclude (`.git` with `.*` or `**/.git`), or when an
    /// exclude matches each of its children (`build` with `build/**` or `build/*`), which
    /// `selects` would then refuse. Includes never prune: a directory need not match an
    /// include to hold files that do. The empty path is the watch's root, pruned only by an
    /// exclude that matches every top-level name, such as `*` or `**`. A temporary directory
    /// (rsync's `.~tmp~`) is watched: its files are renamed out of it, and the rename says
    /// where they came from.
    public func mayContainSelected(directory relativePath: [UInt8]) -> Bool {
        let components = PathComponents.ranges(of: relativePath)
        return !exclude.contains { $0.matchesDirectoryOrAllUnder(relativePath, components) }
    }

    public func mayContainSelected(directory relativePath: String) -> Bool {
        mayContainSelected(directory: Array(relativePath.utf8))
    }
}

/// The names tools give a file while they write it, before they rename it into place
/// (docs/configuration.md, `exclude_temporary`, lists them by tool): a job on one would read
/// a partial file, or find it gone, and the final name is what users expect jobs to get.
public enum TemporaryNames {
    /// Whether `path` (split at `components`) is a temporary name.
    static func contains(_ path: [UInt8], _ components: [Range<Int>]) -> Bool {
        guard let last = components.last else { return false }
        for directory in components.dropLast() where path[directory].elementsEqual(delayedUpdates) { return true }
        return isTemporary(name: path[last])
    }

    private static let delayedUpdates = Array(".~tmp~".utf8)
    private static let suffixes: [[UInt8]] = [".part", ".partial", ".crdownload", ".filepart", ".tmp", ".kate-swp", ".swx"].map { Array($0.utf8) }

    static func isTemporary(name: ArraySlice<UInt8>) -> Bool {
        let dot = UInt8(ascii: "."), hash = UInt8(ascii: "#"), tilde = UInt8(ascii: "~")
        guard let first = name.first, let last = name.last else { return false }
        if last == tilde { return true } // NAME~, NAME.~3~
        if first == hash && last == hash && name.count > 2 { return true } // #NAME#
        if first == dot && name.count > 2 && name[name.startIndex + 1] == hash { return true } // .#NAME
        if name.elementsEqual("4913".utf8) { return true }
        if suffixes.contains(where: { name.count > $0.count && name.suffix($0.count).elementsEqual($0) }) { return true }
        guard first == dot else { return false }
        if name.starts(with: ".goutputstream-".utf8) { return true }
        // .NAME.swp, .NAME.swo ... .NAME.swa (vim's swap files, from p down).
        let count = name.count
        if count > 5, name.suffix(4).prefix(3).elementsEqual(".sw".utf8), let letter = name.last,
           letter >= UInt8(ascii: "a"), letter <= UInt8(ascii: "p") { return true }
        // .NAME.XXXXXX: rsync's (receiver.c, get_tmpname): six letters or digits.
        guard count >= 9, name[name.endIndex - 7] == dot else { return false }
        return name.suffix(6).allSatisfy { byte in
            (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
        }
    }
}
