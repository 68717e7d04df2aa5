"""Fresh Python processes for the tests, without paying for TensorFlow's import in each.

A test that runs ``python -m module``, ``python script.py`` or ``python -c code`` in a process of
its own (a worker of a distributed run, a JAX process group, a run on another backend) spends
most of a small run importing TensorFlow, Keras, JAX and keras-hub: about 7 CPU-seconds each
time on the project's 2-core machines, against under 1 s for the run's own work. `Popen` and
`run` here take the same arguments as `subprocess`'s for those commands and start the process
by forking a server that has imported them already (a "zygote", as Android and Chromium start
their processes): one server per value of the environment variables read at import time
(`IMPORT_ENVIRONMENT`, and the ``JAX_*`` ones but ``JAX_PLATFORMS``), started on first use in
each test process.

The forked process then becomes the command: the caller's environment, working directory,
standard streams and ``sys.argv``, ``sys.path[0]`` as Python sets it for that kind of command,
its code run as ``__main__``, its exit status the command's (``-N`` when signal N ended it).
What differs from a process started anew: TensorFlow, Keras, JAX and keras-hub are imported
before the command starts, with the server's environment (the same as the caller's for every
variable they read at import), and the process is the server's child, not the caller's.

Commands whose result depends on what is imported first, or on a module being missing (the
registration, backend and extras tests), start their processes with `subprocess` itself. So
does every command that is not the running interpreter with one of those three forms, and every
command when ``KERAS_LARGEBATCH_TEST_FORK=0``.
"""

import atexit
import builtins
import gc
import io
import json
import os
import runpy
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DISABLE_ENV = "KERAS_LARGEBATCH_TEST_FORK"
# Read when Python starts or when the preloaded modules are imported; a server per value.
IMPORT_ENVIRONMENT = (
    "KERAS_BACKEND",
    "KERAS_HOME",
    "PYTHONPATH",
    "PYTHONHASHSEED",
    "PYTHONWARNINGS",
    "PYTHONUNBUFFERED",
    "PYTHONDONTWRITEBYTECODE",
    "TF_CPP_MIN_LOG_LEVEL",
    "TF_CPP_MAX_VLOG_LEVEL",
    "TF_ENABLE_ONEDNN_OPTS",
    "TF_USE_LEGACY_KERAS",
)
# JAX reads its JAX_* variables as it is imported, except JAX_PLATFORMS, which the forked
# process sets in JAX's configuration before JAX starts a backend.
PER_PROCESS_JAX_ENVIRONMENT = ("JAX_PLATFORMS",)
PRELOAD = ("numpy", "tensorflow", "keras", "jax", "keras_hub")
SERVER_START_TIMEOUT = 300
_HEADER = struct.Struct("!Q")


# === The caller's side ===


def _enabled():
    return os.environ.get(DISABLE_ENV, "1") != "0"


def _command(args):
    """``(kind, target, arguments)`` for ``[sys.executable, -m|-c|script, ...]``, else None."""
    if isinstance(args, (str, bytes)) or len(args) < 2:
        return None
    args = [os.fspath(arg) for arg in args]
    if args[0] != sys.executable:
        return None
    if args[1] == "-m" and len(args) > 2:
        return "module", args[2], args[3:]
    if args[1] == "-c" and len(args) > 2:
        return "code", args[2], args[3:]
    if not args[1].startswith("-"):
        return "script", args[1], args[2:]
    return None


def _server_key(env):
    jax_names = (name for name in env if name.startswith("JAX_"))
    names = sorted({*IMPORT_ENVIRONMENT, *jax_names} - set(PER_PROCESS_JAX_ENVIRONMENT))
    return tuple((name, env.get(name)) for name in names)


class _Server:
    def __init__(self, env):
        self.directory = tempfile.mkdtemp(prefix="zygote-")
        self.path = os.path.join(self.directory, "socket")
        self.process = subprocess.Popen(
            [sys.executable, "-c", _BOOT, ROOT, self.path],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=open(os.path.join(self.directory, "stderr"), "wb"),  # noqa: SIM115
        )
        ready, _, _ = select.select([self.process.stdout], [], [], SERVER_START_TIMEOUT)
        line = self.process.stdout.readline() if ready else b""
        self.process.stdout.close()
        if line.strip() != b"ready":
            self.process.kill()
            with open(os.path.join(self.directory, "stderr"), errors="replace") as log:
                raise RuntimeError(f"the process server did not start: {log.read()[-4000:]}")

    def close(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for name in os.listdir(self.directory):
            os.unlink(os.path.join(self.directory, name))
        os.rmdir(self.directory)


_servers = {}
_servers_lock = threading.Lock()


def _server(env):
    key = _server_key(env)
    with _servers_lock:
        server = _servers.get(key)
        if server is None or server.process.poll() is not None:
            server = _servers[key] = _Server(env)
        return server


@atexit.register
def _close_servers():
    with _servers_lock:
        for server in _servers.values():
            server.close()
        _servers.clear()


def _fd_for(stream, default_fd, opened, stdout_fd=None):
    """The file descriptor the child gets for one of its standard streams, and the parent's
    end of a pipe when ``stream`` is PIPE."""
    if stream is None:
        return default_fd, None
    if stream == subprocess.DEVNULL:
        fd = os.open(os.devnull, os.O_RDWR)
        opened.append(fd)
        return fd, None
    if stream == subprocess.PIPE:
        read, write = os.pipe()
        opened.append(write)
        return write, read
    if stream == subprocess.STDOUT:
        return stdout_fd, None
    if isinstance(stream, int):
        return stream, None
    return stream.fileno(), None


class Popen:
    """A process running ``args`` (see the module's docstring), with the part of
    `subprocess.Popen`'s interface the tests use: ``pid``, ``returncode``, ``stdout`` and
    ``stderr`` (with PIPE), `poll`, `wait`, `communicate`, `send_signal`, `terminate` and
    `kill`. Returns a `subprocess.Popen` instead for commands it does not start itself."""

    def __new__(cls, args, *, env=None, cwd=None, stdin=None, stdout=None, stderr=None, text=False):
        if not _enabled() or _command(args) is None:
            return subprocess.Popen(
                args, env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr, text=text
            )
        return super().__new__(cls)

    def __init__(
        self, args, *, env=None, cwd=None, stdin=None, stdout=None, stderr=None, text=False
    ):
        self.args = args
        self.returncode = None
        self.stdin = None
        self._exited = threading.Event()
        kind, target, arguments = _command(args)
        env = dict(os.environ if env is None else env)
        opened = []
        try:
            stdin_fd, _ = _fd_for(stdin, 0, opened)
            stdout_fd, stdout_read = _fd_for(stdout, 1, opened)
            stderr_fd, stderr_read = _fd_for(stderr, 2, opened, stdout_fd)
            request = {
                "kind": kind,
                "target": target,
                "arguments": arguments,
                "env": env,
                "cwd": os.path.abspath(os.fspath(cwd) if cwd is not None else os.getcwd()),
            }
            body = json.dumps(request).encode()
            self._connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._connection.connect(_server(env).path)
            socket.send_fds(
                self._connection, [_HEADER.pack(len(body))], [stdin_fd, stdout_fd, stderr_fd]
            )
            self._connection.sendall(body)
            self._reader = self._connection.makefile("rb")
            line = self._reader.readline().split()
            if len(line) != 2 or line[0] != b"pid":
                raise RuntimeError(f"the process server did not start {args}: {line}")
            self.pid = int(line[1])
        finally:
            for fd in opened:
                os.close(fd)
        self.stdout = _wrap(stdout_read, text)
        self.stderr = _wrap(stderr_read, text)
        threading.Thread(target=self._wait_for_exit, daemon=True).start()

    def _wait_for_exit(self):
        line = self._reader.readline().split()
        status = int(line[1]) if len(line) == 2 and line[0] == b"exit" else None
        self.returncode = 255 if status is None else os.waitstatus_to_exitcode(status)
        self._reader.close()
        self._connection.close()
        self._exited.set()

    def poll(self):
        return self.returncode

    def wait(self, timeout=None):
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, signum):
        if self.returncode is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def communicate(self, input=None, timeout=None):
        if input is not None:
            raise ValueError("input: the processes started here take no input, got some")
        results = {}
        readers = [
            threading.Thread(
                target=lambda name=name, stream=stream: results.update({name: stream.read()})
            )
            for name, stream in (("stdout", self.stdout), ("stderr", self.stderr))
            if stream is not None
        ]
        for reader in readers:
            reader.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader in readers:
            reader.join(None if deadline is None else max(0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0, deadline - time.monotonic()))
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        return results.get("stdout"), results.get("stderr")

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()


def _wrap(fd, text):
    if fd is None:
        return None
    stream = open(fd, "rb")  # noqa: SIM115
    return io.TextIOWrapper(stream, encoding="utf-8", errors="replace") if text else stream


def run(
    args,
    *,
    env=None,
    cwd=None,
    capture_output=False,
    text=False,
    timeout=None,
    stdin=None,
    stdout=None,
    stderr=None,
    check=False,
):
    """`subprocess.run` for the commands `Popen` starts (`subprocess.run` itself for others)."""
    if capture_output:
        stdout = stderr = subprocess.PIPE
    if not _enabled() or _command(args) is None:
        return subprocess.run(
            args,
            env=env,
            cwd=cwd,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            text=text,
            timeout=timeout,
            check=check,
        )
    process = Popen(args, env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr, text=text)
    try:
        output, errors = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    completed = subprocess.CompletedProcess(args, process.returncode, output, errors)
    if check:
        completed.check_returncode()
    return completed


# === The server's side ===

_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from tests.support.processes import _serve; _serve(sys.argv[2])"
)


def _serve(path):
    base_path = sys.path[2:]  # past this module's root and the "" of -c
    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:
            pass
    gc.collect()
    gc.freeze()
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    waiting = {}  # child pid -> the connection to tell its exit status
    while True:
        readable, _, _ = select.select([listener], [], [], 0.05)
        if readable:
            connection, _ = listener.accept()
            _start(connection, listener, waiting, base_path)
        while waiting:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            connection = waiting.pop(pid, None)
            if connection is not None:
                try:
                    connection.sendall(f"exit {status}\n".encode())
                except OSError:
                    pass
                connection.close()
        if os.getppid() != parent:  # the caller is gone
            for pid in waiting:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return


def _start(connection, listener, waiting, base_path):
    header, fds, _, _ = socket.recv_fds(connection, _HEADER.size, 3)
    (length,) = _HEADER.unpack(header)
    body = b""
    while len(body) < length:
        chunk = connection.recv(length - len(body))
        if not chunk:
            break
        body += chunk
    request = json.loads(body)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        listener.close()
        for other in waiting.values():
            other.close()
        connection.close()
        _become(request, fds, base_path)
    for fd in fds:
        os.close(fd)
    connection.sendall(f"pid {pid}\n".encode())
    waiting[pid] = connection


def _become(request, fds, base_path):
    """Runs in the forked child: turns it into the requested command and exits with its status."""
    status = 1
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in set(fds):
            if fd > 2:
                os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        if "jax" in sys.modules:
            sys.modules["jax"].config.update(
                "jax_platforms", os.environ.get("JAX_PLATFORMS") or None
            )
        kind, target, arguments = request["kind"], request["target"], request["arguments"]
        if kind == "module":
            sys.argv = [target, *arguments]  # runpy sets argv[0] to the module's file
            path0 = request["cwd"]
        elif kind == "script":
            sys.argv = [target, *arguments]
            path0 = os.path.dirname(os.path.abspath(target))
        else:
            sys.argv = ["-c", *arguments]
            path0 = ""
        sys.path[:] = [path0, *base_path]
        try:
            if kind == "module":
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            elif kind == "script":
                runpy.run_path(target, run_name="__main__")
            else:
                main = types.ModuleType("__main__")
                main.__builtins__ = builtins
                sys.modules["__main__"] = main
                exec(compile(target, "<string>", "exec"), main.__dict__)
            status = 0
        except SystemExit as exit:
            if exit.code is None:
                status = 0
            elif isinstance(exit.code, int):
                status = exit.code
            else:
                print(exit.code, file=sys.stderr)
                status = 1
        except BaseException:
            traceback.print_exc()
            status = 1
        atexit._run_exitfuncs()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(status & 0xFF)
