"""The processes of a run on the JAX backend, one per host: their group, and what they agree on
(`check_same`, which the workers of a TensorFlow run share through their strategy).

    start_process_group(strategy)      # first, before any JAX call that touches a device
    check_same("the run's config", record)   # every process, in the same order

A run is a group of processes when the ``strategy`` settings or Keras's variables name one
(`process_group_settings`): ``coordinator_address`` (``KERAS_DISTRIBUTION_JOB_ADDRESSES``, whose
first address is the coordinator's), ``num_processes`` (``KERAS_DISTRIBUTION_NUM_PROCESSES``)
and ``process_id`` (``KERAS_DISTRIBUTION_PROCESS_ID``), a key before its variable; or when
``strategy.multi_host`` is true, which leaves them to JAX's detection (Cloud TPU VMs, Slurm,
Open MPI). Every process runs the same program; `check_same` makes a process that was given
another config fail, on every process, before any training.
"""

import contextlib
import hashlib
import json
import os
import sys
import threading
import time

import numpy as np

from keras_largebatch.training.config import config_differences

JOB_ADDRESSES_VARIABLE = "KERAS_DISTRIBUTION_JOB_ADDRESSES"
NUM_PROCESSES_VARIABLE = "KERAS_DISTRIBUTION_NUM_PROCESSES"
PROCESS_ID_VARIABLE = "KERAS_DISTRIBUTION_PROCESS_ID"
# The status a process ends with when its group does not form in time.
JOIN_TIMEOUT_EXIT_STATUS = 2
# The status a process ends with when another process of its group stops responding.
LOST_PEER_EXIT_STATUS = 3
# JAX's default heartbeat timeout (seconds), and how long after a `PeerWatch` verdict it may
# come at the earliest.
_JAX_HEARTBEAT_TIMEOUT = 100
_JAX_HEARTBEAT_MARGIN = 30
# Key of each process's heartbeat in the process group's key-value store.
_HEARTBEAT_KEY = "keras_largebatch/heartbeat/{}"
_SHOWN_VALUE_CHARS = 80


def process_group_settings(strategy, environ=None):
    """The ``coordinator_address``, ``num_processes`` and ``process_id`` of the run's process
    group as `jax.distributed.initialize` takes them (each None that JAX is to detect), or None
    when the run is one process.

    Args:
        strategy: the run's `config.StrategyConfig`.
        environ: the environment variables (default ``os.environ``).

    Raises:
        ValueError: some of the three are named and others not (with ``multi_host`` null), a
            variable is not an integer, or the job addresses do not match the processes.
    """
    environ = os.environ if environ is None else environ
    if strategy.multi_host is False:
        return None
    addresses = environ.get(JOB_ADDRESSES_VARIABLE, "").strip()
    settings = {
        "coordinator_address": strategy.coordinator_address
        or (addresses.split(",")[0].strip() if addresses else None),
        "num_processes": _integer(strategy.num_processes, environ, NUM_PROCESSES_VARIABLE),
        "process_id": _integer(strategy.process_id, environ, PROCESS_ID_VARIABLE),
    }
    named = {name: value for name, value in settings.items() if value is not None}
    if not named and not strategy.multi_host:
        return None
    if len(named) < len(settings) and not strategy.multi_host:
        missing = [name for name in settings if name not in named]
        raise ValueError(
            f"a process group needs strategy.coordinator_address, num_processes and process_id "
            f"(or {JOB_ADDRESSES_VARIABLE}, {NUM_PROCESSES_VARIABLE}, {PROCESS_ID_VARIABLE}); "
            f"got {named} without {missing}. Name all three, or set strategy.multi_host=true "
            "to let JAX detect them"
        )
    jobs = [job for job in addresses.split(",") if job.strip()]
    if not strategy.coordinator_address and len(jobs) > 1 and settings["num_processes"]:
        if len(jobs) != settings["num_processes"]:
            raise ValueError(
                f"{JOB_ADDRESSES_VARIABLE}={addresses!r} names {len(jobs)} jobs, but the run has "
                f"num_processes={settings['num_processes']}"
            )
    return settings


def _integer(value, environ, variable):
    if value is not None or variable not in environ:
        return value
    try:
        return int(environ[variable])
    except ValueError:
        raise ValueError(f"{variable} must be an integer, got {environ[variable]!r}") from None


def start_process_group(strategy):
    """Joins this process to the run's process group, when the run has one
    (`process_group_settings`); returns its settings, or None for a run of one process.

    Call it before any JAX call that touches a device. Called again in a process that has
    joined, it only checks that the settings name the group it is in.

    Raises:
        ValueError: bad settings, or settings of another group than the one joined.
        RuntimeError: JAX already touched a device in this process.

    A process whose group does not form within ``strategy.initialization_timeout`` seconds (a
    peer that never starts, a wrong address) ends with the reason on stderr and exit status
    `JOIN_TIMEOUT_EXIT_STATUS` (see `_exit_unless_done`).
    """
    settings = process_group_settings(strategy)
    if settings is None:
        return None
    import jax

    if jax.distributed.is_initialized():
        _check_joined(settings, jax.process_count(), jax.process_index())
        return settings
    timeout = strategy.initialization_timeout
    where = settings["coordinator_address"] or "the coordinator address JAX detects"
    who = (
        "this process"
        if settings["process_id"] is None
        else f"process {settings['process_id']} of {settings['num_processes']}"
    )
    message = (
        f"{who} waited {timeout} s (strategy.initialization_timeout) for the run's processes to "
        f"join its JAX process group at {where}, and not all did: start every process with "
        "the same coordinator address and number of processes and its own process id, or "
        "allow more time"
    )
    # Keras's `keras.distribution.initialize` reads the same variables and calls
    # `jax.distributed.initialize` with them, but takes no timeout (JAX then waits 300 s);
    # its other step, seeding Keras's RNG with a cross-process sum, is not needed: the trainer
    # seeds every process with the config's seed.
    with _exit_unless_done(timeout, message):
        try:
            jax.distributed.initialize(
                **settings,
                initialization_timeout=timeout,
                # JAX's own verdict on a silent process (an abort with a stack dump) comes
                # after `PeerWatch`'s, which says which process and where to resume from.
                heartbeat_timeout_seconds=max(
                    _JAX_HEARTBEAT_TIMEOUT, strategy.peer_timeout + _JAX_HEARTBEAT_MARGIN
                ),
            )
        except RuntimeError as error:
            raise RuntimeError(
                f"the run's JAX process group at {where} must start before JAX touches a "
                "device, but this process already has (call start_process_group("
                f"config.strategy) of keras_largebatch.training.process_group before): {error}"
            ) from None
    return settings


def _check_joined(settings, num_processes, process_id):
    expected = {"num_processes": num_processes, "process_id": process_id}
    named = {name: settings[name] for name in expected if settings[name] is not None}
    if any(expected[name] != value for name, value in named.items()):
        raise ValueError(
            f"this process joined a JAX process group as process {process_id} of "
            f"{num_processes}; the run names {named}. A process joins one group"
        )


@contextlib.contextmanager
def _exit_unless_done(seconds, message):
    """Ends the process, ``message`` on stderr, if the block runs past ``seconds``.

    `jax.distributed.initialize` cannot be interrupted while it waits for the other processes,
    and past its ``initialization_timeout`` it does not raise: it ends the process itself
    (SIGABRT) a few seconds later, saying only that a deadline passed. Ending it first says
    why, where, and with an ordinary exit status.
    """
    timer = threading.Timer(seconds, _exit, (message,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _exit(message):
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    os._exit(JOIN_TIMEOUT_EXIT_STATUS)


def check_same(description, value):
    """Raises ValueError on every process unless all passed an equal ``value`` (plain data,
    compared as JSON); the message names ``description`` and, for each process that differs
    from process 0, the first key where and both values. A collective: every process calls
    it, in the same order, so it is also a barrier. One process: does nothing."""
    import jax

    if jax.process_count() > 1:
        check_same_with(_gather, description, value)


def check_same_with(gather, description, value):
    """`check_same` over the collective ``gather(array)``, which returns the ``array`` of
    every process (each of the same shape and dtype) stacked in process order: JAX's here,
    a tf.distribute strategy's for the workers of a TensorFlow run
    (`keras_largebatch.training.devices.TensorFlowDevices.check_same`)."""
    text = json.dumps(value, sort_keys=True)
    digest = np.frombuffer(hashlib.sha256(text.encode()).digest(), np.uint8)
    digests = gather(digest)
    differing = [
        index for index, other in enumerate(digests) if not np.array_equal(other, digests[0])
    ]
    if not differing:
        return
    # Every process saw the same digests, so all of them take this branch together.
    values = [json.loads(other) for other in _gather_texts(gather, text)]
    raise ValueError(
        f"the run's processes disagree on {description}: "
        + "; ".join(_difference(index, values[index], values[0]) for index in differing)
    )


def _difference(index, value, reference):
    """Where process ``index``'s ``value`` differs from process 0's ``reference``."""
    key = (sorted(config_differences(reference, value)) or [""])[0]
    mine, theirs = _shown(_at(value, key)), _shown(_at(reference, key))
    where = f"{key}=" if key else ""
    return f"process {index} has {where}{mine} where process 0 has {theirs}"


def _at(value, key):
    for part in key.split(".") if key else ():
        if isinstance(value, list):
            value = value[int(part)] if int(part) < len(value) else None
        else:
            value = value.get(part) if isinstance(value, dict) else None
    return value


def _shown(value):
    text = json.dumps(value)
    return text if len(text) <= _SHOWN_VALUE_CHARS else text[: _SHOWN_VALUE_CHARS - 3] + "..."


def _gather(array):
    """``array`` of every process, stacked in process order (all must have its shape)."""
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(array))


def _gather_texts(gather, text):
    encoded = np.frombuffer(text.encode(), np.uint8)
    length = int(gather(np.array(len(encoded), np.int32)).max())
    padded = np.zeros(length, np.uint8)
    padded[: len(encoded)] = encoded
    return [bytes(row).rstrip(b"\0").decode() for row in gather(padded)]


class PeerWatch:
    """Watches the other processes of a JAX process group from a background thread: each
    process writes a heartbeat to the group's key-value store every ``timeout / 6`` seconds and
    reads the others'. A process whose heartbeat stands still for two thirds of ``timeout``
    (killed, its host lost), or a store that no longer answers (process 0, which holds it, is
    gone), ends this process within ``timeout`` seconds of the loss, with a line naming the lost
    process and the run's newest checkpoint and exit status `LOST_PEER_EXIT_STATUS`. Without
    it, a process waits in its next collective, or, where the collective fails at once (a
    closed connection), at its exit, until JAX's heartbeat timeout aborts it with a native
    stack dump. Rerunning the same command on every host resumes from the checkpoint.

    Use as a context manager around the training. Leaving it stops the watch, so that a process
    that finished first and exited is not taken for a lost one; left by a failed JAX
    computation (a collective whose peer is gone), it first waits up to ``timeout`` seconds for
    the watch's verdict.

    Args:
        timeout: seconds without a heartbeat (``strategy.peer_timeout``).
        checkpoint: a function returning the run's newest checkpoint (a path or None).
    """

    def __init__(self, timeout, checkpoint):
        import jax
        from jax._src import distributed

        self.timeout = timeout
        self.checkpoint = checkpoint
        self.process_id = jax.process_index()
        self.peers = [index for index in range(jax.process_count()) if index != self.process_id]
        self._client = distributed.global_state.client
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="PeerWatch", daemon=True)

    def __enter__(self):
        if self.peers:
            self._thread.start()
        return self

    def __exit__(self, kind, error, traceback):
        import jax

        if isinstance(error, jax.errors.JaxRuntimeError) and self._thread.is_alive():
            self._thread.join(self.timeout)
        self._stop.set()

    def _watch(self):
        # A heartbeat is seen at most one interval after it is written, and a stale one is
        # noticed at most one interval late: 4 intervals of silence end the run within 6.
        interval = self.timeout / 6
        silence = 4 * interval
        last_seen = {peer: (None, time.monotonic()) for peer in self.peers}
        beat = 0
        while not self._stop.wait(interval):
            beat += 1
            now = time.monotonic()
            try:
                self._client.key_value_set(
                    _HEARTBEAT_KEY.format(self.process_id), str(beat), allow_overwrite=True
                )
                values = {peer: self._try_get(peer) for peer in self.peers}
            except Exception as error:  # noqa: BLE001 - any failure of the store is the same
                if self._stop.is_set():
                    return
                self._lost(0, f"its key-value store no longer answers ({error})")
                return
            for peer, value in values.items():
                seen_value, seen_at = last_seen[peer]
                if value is not None and value != seen_value:
                    last_seen[peer] = (value, now)
                elif now - seen_at > silence and not self._stop.is_set():
                    self._lost(peer, f"no heartbeat for {now - seen_at:.0f} s")
                    return

    def _try_get(self, peer):
        try:
            return self._client.key_value_try_get(_HEARTBEAT_KEY.format(peer))
        except Exception as error:  # noqa: BLE001
            # Not written yet (a peer that just joined) reads as no heartbeat; any other
            # failure is the store's.
            if "NOT_FOUND" in str(error) or "not found" in str(error).lower():
                return None
            raise

    def _lost(self, peer, why):
        checkpoint = self.checkpoint()
        sys.stderr.write(
            f"error: process {peer} of the run is lost ({why}; strategy.peer_timeout="
            f"{self.timeout}); process {self.process_id} stops. The last checkpoint is "
            f"{checkpoint or 'none (none was written)'}: run the same command again on every "
            "host to resume from it\n"
        )
        sys.stderr.flush()
        os._exit(LOST_PEER_EXIT_STATUS)
