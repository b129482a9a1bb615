"""Outbound HTTP through the host: `http.client`'s connections (and so `urllib.request`, and
what builds on it, such as pandas reading a URL) hand each request to the host, which checks it
against the execution's network policy, makes it (TLS included: there is no `ssl` in this
CPython, and a program cannot turn verification off), and returns the whole response.

`install(fetch)` runs once, at pre-initialisation, before `urllib.request` is imported (it
defines its HTTPS handler only if `http.client` has an HTTPS connection). `fetch(method, url,
headers, body, timeout)` is the entry point's bridge to the host: it returns `(status, reason,
headers, body)` or raises `Refused`, `TimeoutError` or `ConnectionError` with the host's words.
`requests`, `urllib3` and `httpx` use the same bridge (`netclients.py`). urllib's other schemes
(`ftp:`, `file:`, any but http, https and data) are refused here in words, never fetched.
"""

import http.client
import io
import os
import sys
import types


class Refused(PermissionError):
    """The sandbox's network policy refused the request (retrying will not help)."""


def _ssl_module():
    """A stand-in for `ssl`, which this CPython lacks: TLS is the host's, always verified. Its
    contexts are accepted and change nothing, so code that makes one (or tries to turn
    verification off) runs, and is verified all the same."""
    ssl = types.ModuleType("ssl", "TLS is done by the sandbox's host, which always verifies certificates.")

    class SSLError(OSError):
        pass

    class SSLCertVerificationError(SSLError, ValueError):
        pass

    class SSLContext:
        def __init__(self, protocol=None, *args, **kwargs):
            self.protocol = protocol
            self.check_hostname = True
            self.verify_mode = 2
            self.options = 0

        def __getattr__(self, name):
            # load_verify_locations, set_ciphers, load_cert_chain, ...: the host's choice.
            if name.startswith("__"):
                raise AttributeError(name)
            return lambda *args, **kwargs: None

    def create_default_context(*args, **kwargs):
        return SSLContext()

    ssl.SSLError = SSLError
    ssl.SSLCertVerificationError = SSLCertVerificationError
    ssl.CertificateError = SSLCertVerificationError
    ssl.SSLContext = SSLContext
    ssl.create_default_context = create_default_context
    ssl._create_default_https_context = create_default_context
    ssl._create_unverified_context = create_default_context
    ssl.PROTOCOL_TLS_CLIENT = 16
    ssl.PROTOCOL_TLS = 2
    ssl.CERT_NONE, ssl.CERT_OPTIONAL, ssl.CERT_REQUIRED = 0, 1, 2
    ssl.HAS_SNI = True
    ssl.OPENSSL_VERSION = "none (TLS is the sandbox host's)"
    return ssl


class _Sock:
    """What `HTTPResponse` reads the host's response from."""

    def __init__(self, raw):
        self._raw = raw

    def makefile(self, mode, *args, **kwargs):
        return io.BytesIO(self._raw)

    def close(self):
        pass


_HOP = {"transfer-encoding", "content-length", "connection", "keep-alive"}


def _raw_response(status, reason, headers, body, method="GET"):
    """The response as bytes on the wire would be, for `http.client.HTTPResponse` to parse:
    the body whole, with its length (a HEAD's answer keeps the length it announces)."""
    head = method.upper() == "HEAD" and not body
    lines = [f"HTTP/1.1 {status} {reason}".encode("latin-1", "replace")]
    for name, value in headers:
        lower = name.lower()
        if lower not in _HOP or (head and lower == "content-length"):
            lines.append(f"{name}: {value}".encode("latin-1", "replace"))
    if not head:
        lines.append(f"Content-Length: {len(body)}".encode())
    return b"\r\n".join(lines) + b"\r\n\r\n" + bytes(body)


def _parse_request(raw):
    """(method, path, headers, body) of the request `http.client` wrote."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    method, path, _ = lines[0].decode("latin-1").split(" ", 2)
    headers = []
    chunked = False
    for line in lines[1:]:
        name, _, value = line.decode("latin-1").partition(":")
        name, value = name.strip(), value.strip()
        if name.lower() == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
        headers.append((name, value))
    if chunked:
        body = _unchunk(body)
    return method, path, headers, body


def _unchunk(data):
    out = bytearray()
    stream = io.BytesIO(data)
    while True:
        size = int(stream.readline().split(b";")[0].strip() or b"0", 16)
        if size == 0:
            return bytes(out)
        out += stream.read(size)
        stream.readline()


_fetch = None


def fetch(method, url, headers, body, timeout):
    """The host makes the request: `(status, reason, headers, body)`, or raises one of the
    exceptions `errors` makes."""
    return _fetch(method, url, headers, body, timeout)


def response(method, url, headers, body, timeout, response_class=http.client.HTTPResponse):
    """The host's response to the request, read into `response_class` as if from a socket."""
    status, reason, rheaders, rbody = _fetch(method, url, headers, body, timeout)
    raw = _raw_response(status, reason, rheaders, rbody, method)
    r = response_class(_Sock(raw), method=method)
    r.begin()
    return r


class HTTPConnection(http.client.HTTPConnection):
    """`http.client.HTTPConnection`, made by the host: what it would send is collected, and
    the host's response read back as if from a socket."""

    _scheme = "http"

    def __init__(self, host, port=None, timeout=None, source_address=None, blocksize=8192, **kwargs):
        # `context`, `check_hostname`, `key_file`...: TLS is the host's.
        if timeout is None or not isinstance(timeout, (int, float)):
            timeout = None
        super().__init__(host, port, timeout=timeout, source_address=source_address, blocksize=blocksize)
        self._sent = bytearray()

    def connect(self):
        pass

    def send(self, data):
        if hasattr(data, "read"):
            while chunk := data.read(self.blocksize):
                self._sent += chunk.encode("iso-8859-1") if isinstance(chunk, str) else chunk
            return
        if isinstance(data, (bytes, bytearray, memoryview)):
            self._sent += data
            return
        for chunk in data:
            self._sent += chunk.encode("iso-8859-1") if isinstance(chunk, str) else chunk

    def request(self, method, url, body=None, headers={}, *, encode_chunked=False):
        # Made here, as a socket's connection would fail here: urllib turns an OSError from
        # `request` (not from `getresponse`) into URLError.
        super().request(method, url, body, headers, encode_chunked=encode_chunked)
        self._ready = self._exchange()

    def getresponse(self):
        ready, self._ready = getattr(self, "_ready", None), None
        response = ready if ready is not None else self._exchange()
        # The connection is ready for its next request, as after a real one.
        self._HTTPConnection__state = http.client._CS_IDLE
        self._HTTPConnection__response = None
        return response

    def _exchange(self):
        """What was sent so far, made by the host: the response, read."""
        raw, self._sent = bytes(self._sent), bytearray()
        try:
            method, path, headers, body = _parse_request(raw)
        except Exception:
            raise http.client.ResponseNotReady("no request was sent") from None
        default = 443 if self._scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        netloc = host if self.port in (None, default) else f"{host}:{self.port}"
        url = path if path.startswith(("http://", "https://")) else f"{self._scheme}://{netloc}{path}"
        return response(method, url, headers, body, self.timeout, self.response_class)


class HTTPSConnection(HTTPConnection):
    """`http.client.HTTPSConnection`, made by the host (which verifies the server's certificate)."""

    _scheme = "https"
    default_port = http.client.HTTPS_PORT


def install(fetch):
    """Routes `http.client` (and what uses it) through `fetch`; call before `urllib.request`
    is first imported."""
    global _fetch
    _fetch = fetch
    if "ssl" not in sys.modules:
        try:
            import ssl  # noqa: F401
        except ImportError:
            sys.modules["ssl"] = _ssl_module()
    # http.client imported without ssl: its helpers look the stand-in up by this name.
    if getattr(http.client, "ssl", None) is None:
        http.client.ssl = sys.modules["ssl"]
    http.client.HTTPConnection = HTTPConnection
    http.client.HTTPSConnection = HTTPSConnection
    http.client.__all__ = sorted(set(http.client.__all__) | {"HTTPSConnection"})
    import urllib.request  # (its HTTPS handler needs HTTPSConnection, now here)
    # urllib's own handlers for ftp: and file: would import ftplib or mimetypes, which this
    # CPython lacks at run time, and answer "No module named 'ftplib'"; an unknown scheme,
    # "unknown url type". Each now answers as a refused http request does.
    urllib.request.FTPHandler = _refusing("ftp_open")
    urllib.request.CacheFTPHandler = urllib.request.FTPHandler
    urllib.request.FileHandler = _refusing("file_open")
    urllib.request.UnknownHandler = _refusing("unknown_open")


def other_scheme(scheme):
    """Why a URL of `scheme` (not http or https) is not fetched, in words for a model."""
    if scheme == "file":
        return "file: URLs are not opened through urllib in this sandbox; read a file with open(path) instead"
    return (f"{scheme}: is not allowed by the network policy: programs reach only http:// and https:// URLs "
            "(and only the hosts the policy allows)")


def _refusing(method):
    def refuse(self, req):
        import urllib.error
        raise urllib.error.URLError(Refused(other_scheme(req.type)))

    import urllib.request
    return type(f"Refused_{method}", (urllib.request.BaseHandler,), {method: refuse, "__doc__": other_scheme.__doc__})


def errors(kind, message):
    """The exception for the host's `kind` of failure, marked as the host's (`from_host`): the
    builtin types, whose names a program (and its traceback) shows."""
    if kind == "refused":
        e = Refused(message)
    elif kind == "timed-out":
        e = TimeoutError(message)
    else:
        e = ConnectionError(message)
    e.from_host = True
    return e


def from_host(e):
    """Whether `e` is one of `errors`' exceptions."""
    return isinstance(e, OSError) and getattr(e, "from_host", False) is True


_set = set()


def environment(pairs):
    """Sets the program's `os.environ` entries the host gives (a network policy's secrets, as
    placeholders), and drops those an earlier program of the instance had that this one has not."""
    names = {name for name, _ in pairs}
    for name in _set - names:
        os.environ.pop(name, None)
    for name, value in pairs:
        os.environ[name] = value
    _set.clear()
    _set.update(names)
