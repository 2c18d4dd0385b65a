/* Varlink over a Cockpit stream channel to watchkeeper's control socket: each message is one
 * JSON object ended by a NUL byte (docs/architecture.md, "The control socket"). The daemon
 * answers one call at a time per connection, in order, so replies are matched to calls by
 * their place in line. The channel is binary: a reply's UTF-8 may be split anywhere between
 * two frames, and is decoded only once its NUL has come. */

const NUL = 0;

export class VarlinkError extends Error {
    constructor(name, parameters) {
        super(name);
        this.name = name;
        this.parameters = parameters || {};
    }

    /* "PermissionDenied" for "io.watchkeeper.Control.PermissionDenied". */
    get short() {
        return this.name.slice(this.name.lastIndexOf(".") + 1);
    }
}

export class VarlinkConnection {
    /* `path`: the control socket. `superuser`: Cockpit's option for the channel ("try": as
     * root when the session has administrative access, else as the logged-in user). */
    constructor(path, superuser) {
        this.path = path;
        this.superuser = superuser;
        this.channel = null;
        this.pending = [];
        this.chunks = [];
    }

    /* Resolves with the reply's parameters; rejects with a VarlinkError, or with an Error
     * whose `problem` is Cockpit's (not-found, access-denied, disconnected, ...). */
    call(method, parameters) {
        const message = JSON.stringify({ method, parameters: parameters || {} });
        return new Promise((resolve, reject) => {
            this._open();
            this.pending.push({ resolve, reject });
            const bytes = new TextEncoder().encode(message);
            const framed = new Uint8Array(bytes.length + 1);
            framed.set(bytes);
            framed[bytes.length] = NUL;
            this.channel.send(framed);
        });
    }

    /* The next call opens a new connection: after the session gained or lost
     * administrative access, or to start over after a failure. */
    reset() {
        if (this.channel)
            this.channel.close();
        this._closed({ problem: "disconnected", message: "the connection was reset" });
    }

    _open() {
        if (this.channel)
            return;
        const channel = window.cockpit.channel({
            payload: "stream",
            unix: this.path,
            binary: true,
            superuser: this.superuser,
        });
        channel.addEventListener("message", (_event, data) => this._received(data));
        channel.addEventListener("close", (_event, options) => {
            if (this.channel === channel)
                this._closed(options || {});
        });
        this.channel = channel;
        this.chunks = [];
    }

    _received(data) {
        let start = 0;
        for (let index = data.indexOf(NUL); index !== -1; index = data.indexOf(NUL, start)) {
            this.chunks.push(data.subarray(start, index));
            start = index + 1;
            this._reply(this._joined());
        }
        if (start < data.length)
            this.chunks.push(data.slice(start));
    }

    _joined() {
        const length = this.chunks.reduce((sum, chunk) => sum + chunk.length, 0);
        const whole = new Uint8Array(length);
        let offset = 0;
        for (const chunk of this.chunks) {
            whole.set(chunk, offset);
            offset += chunk.length;
        }
        this.chunks = [];
        return whole;
    }

    _reply(bytes) {
        const waiter = this.pending.shift();
        if (!waiter)
            return;
        let reply;
        try {
            reply = JSON.parse(new TextDecoder().decode(bytes));
        } catch (error) {
            waiter.reject(new Error("the daemon's reply is not JSON: " + error.message));
            return;
        }
        if (reply.error)
            waiter.reject(new VarlinkError(reply.error, reply.parameters));
        else
            waiter.resolve(reply.parameters || {});
    }

    _closed(options) {
        this.channel = null;
        this.chunks = [];
        const waiting = this.pending;
        this.pending = [];
        for (const waiter of waiting) {
            const error = new Error(options.message || options.problem || "the control socket closed the connection");
            error.problem = options.problem || "disconnected";
            waiter.reject(error);
        }
    }
}
