"""stdout and stderr as the sandbox writes them."""

import io
import os


class Stream(io.TextIOBase):
    """Unbuffered text stream over a WASI fd: every write reaches the host at once, so
    output produced before a timeout or a trap is never lost in a buffer."""

    def __init__(self, fd, name):
        self._fd = fd
        self.name = name

    @property
    def encoding(self):
        return "utf-8"

    @property
    def errors(self):
        return "backslashreplace"

    def writable(self):
        return True

    def isatty(self):
        return False

    def fileno(self):
        return self._fd

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        self._write_bytes(s.encode("utf-8", "backslashreplace"))
        return len(s)

    def _write_bytes(self, data):
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]

    @property
    def buffer(self):
        return _Buffer(self)


class _Buffer(io.RawIOBase):
    def __init__(self, stream):
        self._stream = stream

    def writable(self):
        return True

    def write(self, b):
        data = bytes(b)
        self._stream._write_bytes(data)
        return len(data)
