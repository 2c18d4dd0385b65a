import Dispatch
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// A file descriptor with exactly one owner, which closes it exactly once.
///
/// The type states what used to live in comments next to `Int32`s: it cannot be copied,
/// so two owners cannot both close it; its `deinit` closes it, so an early return cannot
/// leak it; and the consuming methods hand it on, after which the old owner can no longer
/// touch it. The one hand-off the daemon needs most, to a dispatch read source, is
/// `makeReadSource`: libdispatch may still be polling the fd until the source's cancel
/// handler runs, so the fd is closed there and nowhere else.
public struct OwnedFileDescriptor: ~Copyable, Sendable {
    /// For syscalls while `self` lives. It must not be closed or kept: `self` closes it.
    public let descriptor: FileDescriptor

    /// Takes ownership of `descriptor`: from here on only this value closes it.
    public init(_ descriptor: FileDescriptor) {
        self.descriptor = descriptor
    }

    public init(adopting rawValue: Int32) {
        self.init(FileDescriptor(rawValue: rawValue))
    }

    public var rawValue: Int32 { descriptor.rawValue }

    deinit {
        Self.closeLastReference(descriptor)
    }

    /// Closes now and reports the failure, for callers that want to know (a write end
    /// whose close may report a delayed write error).
    public consuming func close() throws(Errno) {
        let descriptor = self.descriptor
        discard self
        try Self.closeReporting(descriptor)
    }

    /// Gives up ownership: the caller now closes the returned descriptor (a child's
    /// fd handed to spawn, a descriptor wrapped by another owning type).
    public consuming func release() -> FileDescriptor {
        let descriptor = self.descriptor
        discard self
        return descriptor
    }

    /// Hands the fd to a new, inactive read source on `queue` whose cancel handler
    /// closes it, then runs `afterClose` (unregistering the source's statistics, telling
    /// a test it happened). The caller activates the source when it is ready for its
    /// handler, and never closes the fd: cancelling the source is how it is closed.
    ///
    /// libdispatch keeps the fd in its epoll set until the cancel handler runs; a close
    /// before that could let a new fd with the same number be polled for the old source.
    ///
    /// `beforeClose` gets the fd while it is still open, out of epoll: a pidfd is reaped
    /// through it there.
    public consuming func makeReadSource(queue: DispatchQueue, beforeClose: (@Sendable (FileDescriptor) -> Void)? = nil,
                                         afterClose: (@Sendable () -> Void)? = nil) -> FileDescriptorReadSource {
        let descriptor = release()
        let source = DispatchSource.makeReadSource(fileDescriptor: descriptor.rawValue, queue: queue)
        source.setCancelHandler {
            beforeClose?(descriptor)
            Self.closeLastReference(descriptor)
            afterClose?()
        }
        return FileDescriptorReadSource(source: source, descriptor: descriptor)
    }

    /// Linux releases the descriptor even when close fails (EINTR or EIO from a network
    /// file system flushing): retrying could close a number another thread has just been
    /// given. So close is never retried, whatever `retryOnInterrupt` says elsewhere.
    static func closeReporting(_ descriptor: FileDescriptor) throws(Errno) {
        try nothingOrErrno(retryOnInterrupt: false) { Glibc.close(descriptor.rawValue) }.get()
    }

    /// The close of a value going out of scope or of a cancelled source, where no caller
    /// is left to tell. EBADF means the fd was already closed behind its owner's back,
    /// which would also close whatever fd reused the number: that breaks the one-owner
    /// rule, so it stops the program. Other failures still released the fd (see above)
    /// and leave nothing to do.
    static func closeLastReference(_ descriptor: FileDescriptor) {
        do {
            try closeReporting(descriptor)
        } catch .badFileDescriptor {
            preconditionFailure("fd \(descriptor.rawValue) was closed by someone other than its OwnedFileDescriptor: every fd has one owner, and only the owner closes it")
        } catch {
            return
        }
    }
}

/// A read source that owns its fd: `descriptor` is valid for syscalls until `source` is
/// cancelled, and its cancel handler closes it. The handle is copyable so that the
/// source's owner can keep it in a property; the fd's one owner is the source.
// @unchecked Sendable: immutable; the source is driven on its owner's queue, and only its cancel handler closes the fd.
public struct FileDescriptorReadSource: @unchecked Sendable {
    // @unchecked: DispatchSourceRead is a protocol whose concrete source is thread-safe
    // (libdispatch's own locking) but not declared Sendable by the Dispatch overlay.
    public let source: DispatchSourceRead
    public let descriptor: FileDescriptor

    /// Starts delivery. The source is created inactive so that the owner can finish
    /// setting itself up (event handler, buffers) before the first event.
    public func activate() { source.activate() }

    /// Stops delivery; the fd is closed by the cancel handler, once libdispatch has
    /// taken it out of its epoll set. Calling it twice is harmless.
    public func cancel() { source.cancel() }

    public var isCancelled: Bool { source.isCancelled }
}

/// Both ends of a pipe, each with its own owner. Take the ends apart with
/// `let reader = pipe.readEnd` (consuming that field); an end left in the pair closes
/// when the pair goes. Frozen so that code outside the module may take the ends apart too.
@frozen
public struct OwnedPipe: ~Copyable, Sendable {
    public var readEnd: OwnedFileDescriptor
    public var writeEnd: OwnedFileDescriptor

    /// Close-on-exec always (no child inherits a pipe by accident), and O_NONBLOCK on both
    /// ends with `nonBlocking`. The corresponding C function is `pipe2`.
    public init(nonBlocking: Bool = false) throws(Errno) {
        let ends = try FileDescriptor.pipe(options: nonBlocking ? [.closeOnExec, .nonBlocking] : [.closeOnExec])
        readEnd = OwnedFileDescriptor(ends.readEnd)
        writeEnd = OwnedFileDescriptor(ends.writeEnd)
    }
}
