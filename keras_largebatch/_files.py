"""Writing files and directories atomically: the one way the package writes what a reader, a
resumed run or the user relies on.

Everything is first written under a temporary name of its own beside the target, then renamed
onto it, so a reader (or a process killed half-way) sees the old file or the new one, never part
of one. The temporary name is hidden (``.NAME.tmp-<random hex>``), unique to each writer, so two
writers never share one, and in the target's directory, so the rename stays on one file system.

Local paths go through `os`, where a rename is atomic (POSIX). Paths with a scheme
(``gs://bucket/run``) go through `tf.io.gfile`, imported only then, so the core package needs no
TensorFlow; on an object store a rename is a copy and a delete, and a reader still never sees a
partial object.
"""

import contextlib
import os
import shutil
import uuid

_TEMPORARY_MARK = ".tmp-"


def _is_remote(path):
    return "://" in path


def _gfile():
    import tensorflow as tf

    return tf.io.gfile


def temporary_path(path, suffix=""):
    """A new name beside ``path`` for writing it: ``DIR/.NAME.tmp-<random hex>SUFFIX``.

    ``suffix`` keeps an extension a writer insists on (Keras saves weights only to names
    ending in ``.weights.h5``; matplotlib picks the image format from the extension).
    """
    directory, name = os.path.split(os.fspath(path))
    return os.path.join(directory, f".{name}{_TEMPORARY_MARK}{uuid.uuid4().hex}{suffix}")


def target_of(temporary_name):
    """The file name a temporary name of `temporary_path` was made for, or None if
    ``temporary_name`` is not one (how a writer finds what a killed writer left behind)."""
    if not temporary_name.startswith(".") or _TEMPORARY_MARK not in temporary_name:
        return None
    return temporary_name[1:].rsplit(_TEMPORARY_MARK, 1)[0]


def _rename(source, target):
    if _is_remote(target):
        _gfile().rename(source, target, overwrite=True)
    else:
        os.replace(source, target)


def remove(path):
    """Deletes the file ``path`` if it exists."""
    path = os.fspath(path)
    if _is_remote(path):
        if _gfile().exists(path):
            _gfile().remove(path)
    elif os.path.lexists(path):
        os.remove(path)


@contextlib.contextmanager
def replacing(path, suffix=""):
    """Yields a temporary path to write the new content of ``path`` to.

    When the block ends normally, the temporary file replaces ``path``; when it raises, the
    temporary file is removed and ``path`` is left as it was::

        with replacing(path, suffix=".weights.h5") as temporary:
            model.save_weights(temporary)
    """
    path = os.fspath(path)
    temporary = temporary_path(path, suffix)
    try:
        yield temporary
    except BaseException:
        remove(temporary)
        raise
    _rename(temporary, path)


def _open(path, mode):
    if _is_remote(path):
        return _gfile().GFile(path, mode)
    return open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"}))


def write_text(path, text):
    """Writes ``text`` (UTF-8) to ``path`` atomically; the directory must exist."""
    with replacing(path) as temporary, _open(temporary, "w") as stream:
        stream.write(text)
    return path


def write_bytes(path, data):
    """Writes ``data`` to ``path`` atomically; the directory must exist."""
    with replacing(path) as temporary, _open(temporary, "wb") as stream:
        stream.write(data)
    return path


def copy_file(source, path):
    """Copies the local file ``source`` to ``path`` atomically."""
    with replacing(path) as temporary:
        shutil.copyfile(source, temporary)
    return path


@contextlib.contextmanager
def new_directory(path):
    """Yields a new temporary directory beside ``path`` to fill; when the block ends normally it
    becomes ``path``, which must be absent or an empty directory.

    A directory that holds anything is never replaced: `FileExistsError` names it, before the
    block runs if it holds something already, or at the end if another process filled it
    meanwhile (the temporary directory is then removed). Local paths only.
    """
    if _is_remote(os.fspath(path)):
        raise ValueError(f"new_directory writes local directories only, got {path!r}")
    path = os.path.abspath(os.fspath(path))
    _refuse_non_empty(path)
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    temporary = temporary_path(path)
    os.mkdir(temporary)
    try:
        yield temporary
        try:
            # Replaces an empty directory; refuses one that holds anything (POSIX rename).
            os.rename(temporary, path)
        except OSError:
            _refuse_non_empty(path)
            raise
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise


def _refuse_non_empty(path):
    if os.path.exists(path) and not (os.path.isdir(path) and not os.listdir(path)):
        raise FileExistsError(
            f"{path} already exists and is not an empty directory; nothing there was changed"
        )
